package postgres

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/stageq/stageq/dialect"
)

// pgconnConfig parses a DSN for pgx. The scheme postgresql:// is accepted too.
func pgconnConfig(dsn string) (*pgx.ConnConfig, error) {
	if strings.HasPrefix(dsn, "postgresql://") {
		dsn = "postgres://" + strings.TrimPrefix(dsn, "postgresql://")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse postgres DSN %s: %w", dialect.Redact(dsn), redactErr(err))
	}
	return cfg, nil
}

// redactErr keeps pgx's parse errors from echoing a password back.
func redactErr(err error) error {
	msg := err.Error()
	if strings.Contains(strings.ToLower(msg), "password") {
		return fmt.Errorf("invalid DSN")
	}
	return err
}
