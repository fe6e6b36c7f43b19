package dialect_test

import (
	"errors"
	"fmt"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/stageq/stageq/dialect"
)

// TestConnLostSQLServerSeverity: SQL Server errors of severity 20 and above are
// fatal, and the connection usually ends with them (Database Engine error
// severities, learn.microsoft.com/sql/relational-databases/errors-events/
// database-engine-error-severities); a session ended by KILL gets one. Errors a
// user can correct (11-16) and resource errors (17-19) leave the connection.
func TestConnLostSQLServerSeverity(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"severity 20", mssql.Error{Number: 50996, Class: 20, Message: "a fatal error in the current task"}, true},
		{"severity 21, wrapped", fmt.Errorf("run the body: %w", mssql.Error{Number: 50999, Class: 21, Message: "a fatal error"}), true},
		{"severity 16", mssql.Error{Number: 50004, Class: 16, Message: "stageq: bad input"}, false},
		{"deadlock victim, 13", mssql.Error{Number: 1205, Class: 13, Message: "deadlock victim"}, false},
		{"severity 19", mssql.Error{Number: 50997, Class: 19, Message: "a limit was exceeded"}, false},
		{"permission denied, 14", mssql.Error{Number: 50998, Class: 14, Message: "permission denied"}, false},
	}
	for _, c := range cases {
		if got := dialect.ConnLost(c.err); got != c.want {
			t.Errorf("%s: ConnLost(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	if dialect.ConnLost(errors.New("plain")) {
		t.Error("a plain error counts as a lost connection")
	}
}
