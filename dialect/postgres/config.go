package postgres

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/stageq/stageq/dialect"
)

// pgconnConfig parses a DSN for pgx. The scheme postgresql:// is accepted too.
// A DSN without connect_timeout gets dialect.DefaultConnectTimeout, so a server
// that accepts TCP and never answers cannot hang a connect.
func pgconnConfig(dsn string) (*pgx.ConnConfig, error) {
	if strings.HasPrefix(dsn, "postgresql://") {
		dsn = "postgres://" + strings.TrimPrefix(dsn, "postgresql://")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: parse postgres DSN %s: %s", dialect.ErrBadDSN, dialect.Redact(dsn), scrub(err.Error(), dsn))
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = dialect.DefaultConnectTimeout
	}
	return cfg, nil
}

// scrub removes the DSN's password from a driver message: pgx masks it in the
// DSN it quotes, but a message may still carry part of it.
func scrub(msg, dsn string) string {
	msg = strings.ReplaceAll(msg, dsn, dialect.Redact(dsn))
	if _, rest, ok := strings.Cut(dsn, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
				if dec, err := url.PathUnescape(pw); err == nil && dec != "" {
					msg = strings.ReplaceAll(msg, dec, "xxxxx")
				}
			}
		}
	}
	return msg
}
