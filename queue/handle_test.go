package queue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stageq/stageq/queue"
)

// TestHandleRefusesKindsNoTaskCanCarry: reserved, empty, over-long kinds and
// kinds no dialect stores (a NUL byte, invalid UTF-8) are refused when
// registered, before any claim passes them to the database.
func TestHandleRefusesKindsNoTaskCanCarry(t *testing.T) {
	_, c := openSQLite(t)
	w, err := queue.NewWorker(c, queue.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *queue.Task) error { return nil }
	for _, kind := range []string{"", queue.KindSQL, queue.KindExec, strings.Repeat("k", 201), "re\x00port", "re\xffport"} {
		if err := w.Handle(kind, h); err == nil {
			t.Errorf("Handle(%.20q…) accepted", kind)
		}
	}
	if err := w.Handle(strings.Repeat("k", 200), h); err != nil {
		t.Errorf("a 200-character kind: %v", err)
	}
	if got := len(w.Kinds()); got != 2 {
		t.Errorf("kinds %v, want sql and the 200-character one", w.Kinds())
	}
}
