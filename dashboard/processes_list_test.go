package dashboard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// TestProcessesPageSaysWhatItHides: the processes page lists open processes
// (active or failed), as queuectl status does, and says so. Before, it read
// "Processes that have not succeeded" while a cancelled process, which has
// not succeeded, was left out; an operator looking for it was told it was not
// there. ?all=1 shows it.
func TestProcessesPageSaysWhatItHides(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		cancelledProcess(t, c, "called-off")
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		_, open := fetch(t, "GET", base+"/")
		if strings.Contains(open, `data-process="called-off"`) {
			t.Fatal("the default list shows the cancelled process: this test assumes it hides it")
		}
		if strings.Contains(open, "not succeeded") || !strings.Contains(open, "active or failed") {
			t.Errorf("the default list hides cancelled processes but does not say so:\n%s", sub(open))
		}
		_, all := fetch(t, "GET", base+"/?all=1")
		if !strings.Contains(all, `data-process="called-off" data-state="cancelled"`) {
			t.Errorf("?all=1 does not show the cancelled process")
		}
	})
}

// sub is the page's first class="sub" paragraph, for a failure message.
func sub(page string) string {
	_, after, _ := strings.Cut(page, `<p class="sub">`)
	text, _, _ := strings.Cut(after, "</p>")
	return text
}

// TestNoCancelButtonOnACancelledProcess: a cancelled process has no waiting or
// failed task left, so cancelling it again is refused (409, "it has no
// waiting or failed tasks"); its rows on / ?all=1 and its page offer no
// Cancel. Before, both did, and the confirmed action could only fail.
func TestNoCancelButtonOnACancelledProcess(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		op := cancelledProcess(t, c, "called-off")
		if _, _, err := op.ProcessCancel(ctx, "called-off"); !errors.Is(err, dialect.ErrWrongState) {
			t.Fatalf("cancelling a cancelled process again: %v, want ErrWrongState (this test assumes it is refused)", err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		for _, path := range []string{"/?all=1", "/process/called-off"} {
			_, page := fetch(t, "GET", base+path)
			if !strings.Contains(page, "called-off") {
				t.Fatalf("%s does not show the process", path)
			}
			if strings.Contains(page, `data-action="process-cancel" data-target="called-off"`) {
				t.Errorf("%s offers to cancel the cancelled process, an action that can only be refused", path)
			}
		}
	})
}

// cancelledProcess submits a process with one task due in an hour and cancels
// it, and returns the operator it cancelled it with.
func cancelledProcess(t *testing.T, c *queue.Client, name string) dialect.Operator {
	t.Helper()
	ctx := context.Background()
	one := 1
	if _, err := c.Submit(ctx, stages.Plan{Process: name, Stages: []stages.Stage{{Order: &one,
		Tasks: []stages.Task{{Body: "SELECT 1", RunAt: time.Now().Add(time.Hour)}}}}}); err != nil {
		t.Fatal(err)
	}
	op, err := dialect.AsOperator(c.Dialect())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.ProcessCancel(ctx, name); err != nil {
		t.Fatal(err)
	}
	return op
}
