package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestConnectTimeoutDefault: a DSN without connect_timeout is bounded by
// dialect.DefaultConnectTimeout; one with it keeps its own.
func TestConnectTimeoutDefault(t *testing.T) {
	for dsn, want := range map[string]time.Duration{
		"postgres://u@h/db":                     dialect.DefaultConnectTimeout,
		"postgresql://u@h/db?connect_timeout=3": 3 * time.Second,
		dialect.WithConnectTimeout("postgres://u@h/db?connect_timeout=3", 1500*time.Millisecond): 2 * time.Second,
	} {
		cfg, err := pgconnConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ConnectTimeout != want {
			t.Errorf("%s: ConnectTimeout %s, want %s", dsn, cfg.ConnectTimeout, want)
		}
	}
	_, err := pgconnConfig("postgres://u:S3cr%zzPW@h/db")
	if !errors.Is(err, dialect.ErrBadDSN) || strings.Contains(err.Error(), "S3cr") {
		t.Errorf("bad DSN: %v", err)
	}
}
