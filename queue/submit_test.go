package queue_test

import (
	"testing"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// SubmitTx is the enqueue inside the caller's transaction; without one it
// refuses rather than split the submission over transactions of its own.
func TestSubmitTxNeedsATransaction(t *testing.T) {
	ctx, c := openSQLite(t)
	one := 1
	if _, err := c.SubmitTx(ctx, nil, stages.Plan{Process: "p", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{{Body: "x"}}}}}); err == nil {
		t.Fatal("SubmitTx without a transaction succeeded")
	}
	tasks, err := c.Dialect().TaskList(ctx, dialect.TaskFilter{Process: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 0 {
		t.Errorf("SubmitTx without a transaction left %d tasks", len(tasks))
	}
}
