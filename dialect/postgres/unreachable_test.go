package postgres

import (
	"context"
	"database/sql"
	"net"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/internal/pgtest"
)

// TestUnreachableTellsAnOutageFromARefusal: what pgx answers when the server
// cannot be reached (nothing listens, it never answers a connection, its name
// does not resolve) is dialect.Unreachable, which Client.Wait and enqueue
// --wait wait out; what a server answers (no such database, no such role) is
// not, so a wait does not spin on it. A server that hung at connect ran out
// of the connect timeout and ended the wait.
func TestUnreachableTellsAnOutageFromARefusal(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	closed.Close() // nothing listens there now
	base := pgtest.NewDatabase(t, "unreachable")
	missingDB := strings.Replace(base, "/unreachable", "/stageq_no_such_database", 1)
	if missingDB == base {
		t.Fatalf("cannot name another database in %s", dialect.Redact(base))
	}
	for _, c := range []struct {
		name, dsn   string
		unreachable bool
	}{
		{"nothing listens", "postgres://postgres@" + refusing + "/test?sslmode=disable", true},
		{"the server never answers", "postgres://postgres@" + hung.Addr().String() + "/test?sslmode=disable&connect_timeout=1", true},
		{"the name does not resolve", "postgres://postgres@stageq-no-such-host.invalid/test?sslmode=disable&connect_timeout=2", true},
		{"no such database", missingDB, false},
		{"no such role", strings.Replace(missingDB, "postgres@", "stageq_no_such_role@", 1), false},
	} {
		db, err := sql.Open("pgx", c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		err = db.PingContext(context.Background())
		db.Close()
		if err == nil {
			t.Errorf("%s: connected", c.name)
			continue
		}
		if got := dialect.Unreachable(err); got != c.unreachable {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", c.name, err, got, c.unreachable)
		}
	}
}
