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
