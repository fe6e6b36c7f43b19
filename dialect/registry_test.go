package dialect

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h/db":                       "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=pw":              "postgres://u@h/db?password=xxxxx",
		"sqlserver://sa:Secret!1@h:1433?database=x":  "sqlserver://sa:xxxxx@h:1433?database=x",
		"sqlserver://sa@h?database=x&Password=pw":    "sqlserver://sa@h?Password=xxxxx&database=x",
		"sqlite://file.db":                           "sqlite://file.db",
		"server=h;user id=sa;password=pw;database=x": "server=h;user id=sa;password=xxxxx;database=x",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOpenUnknownScheme(t *testing.T) {
	_, err := Open(context.Background(), "mysql://root@h/db")
	if !errors.Is(err, ErrUnknownScheme) || !strings.Contains(err.Error(), `"mysql"`) {
		t.Errorf("err = %v", err)
	}
}

// TestRedactUnparseable: a DSN that is not a valid URL still never shows its
// password (issue 10, item 1).
func TestRedactUnparseable(t *testing.T) {
	for in, secret := range map[string]string{
		"postgres://postgres:S3cr%zzPW@127.0.0.1:5999/x":       "S3cr",
		"postgres://u:pa ss@h/db":                              "pa ss",
		"sqlserver://sa:p%w@rd@h:1433?database=x":              "p%w",
		"sqlite://x.db?a=%zz&password=S3cr":                    "S3cr",
		"postgres://u@h/db?x=%zz&Password=S3cr&sslmode=off":    "S3cr",
		"host=h user=u password=S3cr dbname=x":                 "S3cr",
		"server=h;user id=sa;PWD=S3cr;database=x":              "S3cr",
		"postgres://u:S3cr@h/db?connect_timeout=%zz":           "S3cr",
		"postgresql://u:S3cr@[::1]:5432/db?sslmode=disable#%z": "S3cr",
	} {
		got := Redact(in)
		if strings.Contains(got, secret) {
			t.Errorf("Redact(%q) = %q: shows the password", in, got)
		}
		if !strings.Contains(got, "xxxxx") {
			t.Errorf("Redact(%q) = %q: no mask", in, got)
		}
	}
}

// TestOpenWithNoDialectLinked: this package's tests link no dialect, as a
// build with every stageq_no_<dialect> tag would; the error says so instead
// of listing nothing.
func TestOpenWithNoDialectLinked(t *testing.T) {
	if len(Schemes()) > 0 {
		t.Skip("dialects are linked into this test binary")
	}
	_, err := Open(context.Background(), "postgres://u@h/db")
	if !errors.Is(err, ErrUnknownScheme) || !strings.Contains(err.Error(), "links no dialect") {
		t.Errorf("err = %v", err)
	}
}
