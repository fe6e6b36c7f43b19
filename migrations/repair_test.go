package migrations

import (
	"errors"
	"testing"

	"github.com/golang-migrate/migrate/v4/database"
)

// TestBriefKeepsTheCause: a failed migration is reported by the server's
// message and its line, or, where the driver names only the step that failed
// (a lost connection, a locked SQLite file), by that step and its cause;
// never by golang-migrate's quote of the whole file.
func TestBriefKeepsTheCause(t *testing.T) {
	file := []byte("CREATE TABLE x (y int);\n-- and a thousand lines more")
	for _, c := range []struct {
		in   error
		want string
	}{
		{database.Error{Err: "migration failed: relation \"x\" already exists", Line: 12, Query: file, OrigErr: errors.New("ERROR: relation")},
			`relation "x" already exists (line 12 of the file)`},
		{database.Error{Err: "migration failed: stageq: refused (column 0)", Line: 1, Query: file, OrigErr: errors.New("ERROR: stageq")},
			"stageq: refused"},
		{database.Error{Err: "migration failed", Query: file, OrigErr: errors.New("read tcp: connection reset by peer")},
			"migration failed: read tcp: connection reset by peer"},
		{&database.Error{Err: "transaction commit failed", Query: file, OrigErr: errors.New("database is locked (5)")},
			"transaction commit failed: database is locked (5)"},
		{&database.Error{OrigErr: errors.New("SQL logic error: table t already exists (1)"), Query: file},
			"SQL logic error: table t already exists (1)"},
	} {
		got := brief(c.in)
		if got.Error() != c.want {
			t.Errorf("brief(%v)\n = %q\nwant %q", c.in, got.Error(), c.want)
		}
		var dbErr database.Error
		if !errors.As(got, &dbErr) {
			t.Errorf("brief(%v) hides the original from errors.As", c.in)
		}
	}
}
