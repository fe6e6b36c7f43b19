package conformance

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestEnqueueFromSQL: SQL users enqueue with one call shipped by the migrations
// (SELECT stageq.enqueue(…) on PostgreSQL, EXEC stageq.Enqueue on SQL Server),
// with the same validation as the CLI; the task then runs like any other.
// SQLite has no stored routines: its enqueue paths are the CLI and the Go API.
func TestEnqueueFromSQL(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ctx := context.Background()
		var enqueue, bad string
		switch db.Dialect {
		case "postgres":
			enqueue = `SELECT stageq.enqueue('SELECT 1', 200, process => 'from-sql', max_attempts => 2)`
			bad = `SELECT stageq.enqueue('SELECT 1', -1)`
		case "sqlserver":
			enqueue = `DECLARE @id bigint; EXEC stageq.Enqueue @Body = N'SELECT 1', @ExecutionOrder = 200, @Process = N'from-sql', @MaxAttempts = 2, @TaskId = @id OUTPUT; SELECT @id`
			bad = `DECLARE @id bigint; EXEC stageq.Enqueue @Body = N'SELECT 1', @ExecutionOrder = -1, @TaskId = @id OUTPUT`
		default:
			t.Skip("SQLite has no stored routines; enqueue through the CLI or the Go API")
		}
		var id int64
		if err := db.D.DB().QueryRowContext(ctx, enqueue).Scan(&id); err != nil {
			t.Fatalf("enqueue from SQL: %v", err)
		}
		if _, err := db.D.DB().ExecContext(ctx, bad); err == nil || !strings.Contains(err.Error(), "execution_order") {
			t.Errorf("a negative order from SQL: err = %v, want a message about execution_order", err)
		}
		tasks := db.tasks(t, dialect.TaskFilter{})
		if len(tasks) != 1 || tasks[0].ID != id || tasks[0].Process != "from-sql" || tasks[0].Order != 200 || tasks[0].MaxAttempts != 2 {
			t.Fatalf("tasks = %+v", tasks)
		}
		startWorkers(t, db, 1, fastConfig(), nil)
		db.waitSucceeded(t, 10*time.Second, "the task to run", id)
	})
}
