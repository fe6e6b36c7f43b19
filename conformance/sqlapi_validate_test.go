package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestSQLAPIValidatesLikeTheCLI (issue 10, item 6): stageq.validate_tasks, which
// stageq.submit runs before writing anything, refuses what the CLI refuses, with
// 22023 and a message naming the task and the field; and stageq.submit writes
// nothing for such input.
func TestSQLAPIValidatesLikeTheCLI(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		if db.Dialect != "postgres" {
			t.Skip("the SQL API with JSON tasks is PostgreSQL's")
		}
		ctx := context.Background()
		ok := `{"execution_order": 1, "body": "SELECT 1"}`
		for _, c := range []struct{ process, tasks, says string }{
			{"p", `[{"execution_order": 1, "body": "SELECT 1", "atomc": true}]`, `task 1: unknown field atomc`},
			{"p", `[` + ok + `, {"execution_order": 1, "body": "x", "Priority": 2}]`, `task 2: unknown field "Priority"`},
			{"p", `[{"execution_order": 1.5, "body": "SELECT 1"}]`, "task 1: execution_order must be a whole number"},
			{"p", `[{"execution_order": -1, "body": "SELECT 1"}]`, "execution_order must be a whole number from 0"},
			{"p", `[{"execution_order": 4294967296, "body": "SELECT 1"}]`, "execution_order must be a whole number from 0"},
			{"p", `[{"execution_order": "1", "body": "SELECT 1"}]`, "execution_order must be a whole number"},
			{"p", `[{"body": "SELECT 1"}]`, "execution_order is required"},
			{"p", `[{"execution_order": 1, "body": "   "}]`, "body must not be empty"},
			{"p", `[{"execution_order": 1, "body": 7}]`, "body must be a string"},
			{"p", `[{"execution_order": 1, "body": "x", "max_attempts": 0}]`, "max_attempts must be a whole number from 1"},
			{"p", `[{"execution_order": 1, "body": "x", "priority": 2147483648}]`, "priority must be a whole number that fits in 32 bits"},
			{"p", `[{"execution_order": 1, "body": "x", "atomic": "yes"}]`, "atomic must be true or false"},
			{"p", `[{"execution_order": 1, "body": "x", "run_at": "soon-ish"}]`, `run_at "soon-ish" is not a timestamp`},
			{"p", `[{"execution_order": 1, "body": "x", "delay_ms": -5}]`, "delay_ms must be a whole number >= 0"},
			{"p", `[{"execution_order": 1, "body": "x", "limit_key": "kind:email"}]`, "reserved"},
			{"p", `[{"execution_order": 1, "body": "x", "kind": ""}]`, "kind must not be empty"},
			{"p", `[1]`, "task 1: must be a JSON object"},
			{"p", `[]`, "at least one task"},
			{"  ", `[` + ok + `]`, "process: name must not be empty"},
		} {
			_, err := db.D.DB().ExecContext(ctx, `SELECT `+db.routine("validate_tasks")+`($1, $2::jsonb)`, c.process, c.tasks)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, c.says) {
				t.Errorf("validate_tasks(%q, %s): %v; want 22023 saying %q", c.process, c.tasks, err, c.says)
			}
		}
		if _, err := db.D.DB().ExecContext(ctx, `SELECT `+db.routine("validate_tasks")+`('p', $1::jsonb)`,
			`[{"execution_order": 0, "body": "SELECT 1", "kind": "sql", "max_attempts": 5, "priority": -3, "atomic": true,
			   "run_at": "2030-01-01T00:00:00Z", "delay_ms": 0, "limit_key": "erp", "priority": null}]`); err != nil {
			t.Errorf("a valid task was refused: %v", err)
		}

		// stageq.submit, which forwards to the routines' submit, runs it before writing.
		_, err := db.D.DB().ExecContext(ctx, `SELECT * FROM stageq.submit('p', '[{"execution_order": 1, "body": "SELECT 1", "atomc": true}]')`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22023" || !strings.Contains(pe.Message, "atomc") {
			t.Errorf("stageq.submit with \"atomc\": %v", err)
		}
		assertEmpty(t, db)
	})
}
