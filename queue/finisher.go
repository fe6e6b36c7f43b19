package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stageq/stageq/dialect"
)

// maxFinishBatch bounds one batch of recorded results.
const maxFinishBatch = 256

// Under load the finisher waits a little for more results before it writes:
// a recorded end costs a commit whatever the batch size, and results arrive
// one body at a time. It waits only after a batch of finishGatherMin or more
// (the sign of load), so a lone result, a stage's handoff among them, is
// written at once.
const (
	finishGather    = 2 * time.Millisecond
	finishGatherMin = 8
)

// finishReq asks the finisher to record one attempt's end.
type finishReq struct {
	fp   dialect.FinishParams
	done chan error
}

// finishLoop records attempts' ends in batches when the dialect can
// (dialect.BatchFinisher). It takes what has arrived, waits up to
// finishGather for more when the last batch says the worker is loaded, and
// writes it; whatever arrives during that write goes in the next. Under load
// that is one round trip for many tasks; idle, one for one.
func (w *Worker) finishLoop(ctx context.Context, bf dialect.BatchFinisher, in <-chan finishReq) {
	split := &splitter{slots: make(chan struct{}, maxSplitWrites)}
	defer split.wg.Wait()
	last := 0
	for first := range in {
		var wait time.Duration
		if last >= finishGatherMin {
			wait = finishGather
		}
		batch := collectBatch(in, first, wait)
		last = len(batch)
		w.writeBatch(ctx, bf, batch, split)
	}
}

// maxHandBackWrites bounds the hand-back batches being written at once.
const maxHandBackWrites = 8

// handBackLoop records hand-backs (Worker.handBacks) in a batch per process,
// up to maxHandBackWrites at once. Each locks its process's row, which an
// application's open submission may hold for long: one such process must not
// hold back the hand-backs of the others past the statement timeout, which
// would leave their attempts to run again once their leases expired.
func (w *Worker) handBackLoop(ctx context.Context, bf dialect.BatchFinisher, in <-chan finishReq) {
	var writing sync.WaitGroup
	defer writing.Wait() // every answer given before the worker's advancer stops
	slots := make(chan struct{}, maxHandBackWrites)
	for first := range in {
		byProcess := map[int64][]finishReq{}
		var order []int64
		for _, r := range collectBatch(in, first, 0) {
			if _, seen := byProcess[r.fp.ProcessID]; !seen {
				order = append(order, r.fp.ProcessID)
			}
			byProcess[r.fp.ProcessID] = append(byProcess[r.fp.ProcessID], r)
		}
		for _, pid := range order {
			slots <- struct{}{}
			writing.Add(1)
			go func(batch []finishReq) {
				defer func() { <-slots; writing.Done() }()
				// Not split when it fails: what fails a batch of one process's
				// hand-backs is its process's row, held, which each end alone
				// would wait for again.
				w.writeBatch(ctx, bf, batch, nil)
			}(byProcess[pid])
		}
	}
}

// maxSplitWrites bounds the ends of failed batches sent again at once.
const maxSplitWrites = 4

// splitter sends the ends of a failed batch again one by one, up to
// maxSplitWrites at once; wg tracks them.
type splitter struct {
	wg    sync.WaitGroup
	slots chan struct{}
}

// writeBatch records one batch of ends and answers each request. When a batch
// of several fails and split is not nil, the ends it did not record are sent
// again one by one, apart: one task row that another transaction holds (an
// operator's SELECT ... FOR UPDATE) fails the whole batch at the statement
// timeout, and its other ends would otherwise be lost with it, their attempts
// run again once their leases expired.
func (w *Worker) writeBatch(ctx context.Context, bf dialect.BatchFinisher, batch []finishReq, split *splitter) {
	ps := make([]dialect.FinishParams, len(batch))
	for i, r := range batch {
		ps[i] = r.fp
	}
	fctx, cancel := w.stmtCtx(ctx)
	res, err := bf.TaskFinishMany(fctx, ps)
	err = w.stmtErr(fctx, ctx, fmt.Sprintf("record the end of %d tasks", len(ps)), err)
	cancel()
	// A batch that went in several transactions may have failed after some
	// committed: those ends are recorded (sent again, they would come back
	// as lost leases), and their stages may have ended.
	w.advance(res.Advance)
	for i, r := range batch {
		switch {
		case !res.Recorded(i, err) && len(batch) > 1 && split != nil:
			split.wg.Add(1)
			go func() {
				defer split.wg.Done()
				split.slots <- struct{}{}
				defer func() { <-split.slots }()
				w.writeBatch(ctx, bf, []finishReq{r}, split)
			}()
		case !res.Recorded(i, err):
			r.done <- err
		case i >= len(res.Held) || !res.Held[i]:
			r.done <- dialect.ErrLeaseLost
		default:
			r.done <- nil
		}
	}
}

// finish records an attempt's end: through the batching finisher when there is
// one (successes and hand-backs apart: see Worker.handBacks), otherwise
// directly. Either way the statement is bounded by the statement timeout: the
// finisher bounds each batch, so an attempt waiting on it needs no timer of
// its own.
func (w *Worker) finish(ctx context.Context, fp dialect.FinishParams) error {
	defer w.cfg.Metrics.timeFinish()()
	if w.finishes == nil {
		fctx, cancel := w.stmtCtx(ctx)
		err := w.d.TaskFinish(fctx, nil, fp)
		err = w.stmtErr(fctx, ctx, "record the task's end", err)
		cancel()
		if err != nil {
			return err
		}
		if fp.ProcessID != 0 {
			w.advance([]int64{fp.ProcessID})
		}
		return nil
	}
	done := make(chan error, 1)
	if fp.Outcome == dialect.OutcomeSucceeded {
		w.finishes <- finishReq{fp: fp, done: done}
	} else {
		w.handBacks <- finishReq{fp: fp, done: done}
	}
	return <-done
}

// collectBatch takes first and whatever else has arrived on in, up to
// maxFinishBatch; with wait > 0 it also waits that long for more.
func collectBatch(in <-chan finishReq, first finishReq, wait time.Duration) []finishReq {
	batch := []finishReq{first}
	var deadline <-chan time.Time // nil, so never ready: do not wait
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for len(batch) < maxFinishBatch {
		var r finishReq
		var ok bool
		select {
		case r, ok = <-in: // what has arrived goes first
		default:
			if deadline == nil {
				return batch
			}
			select {
			case r, ok = <-in:
			case <-deadline:
				return batch
			}
		}
		if !ok {
			return batch
		}
		batch = append(batch, r)
	}
	return batch
}
