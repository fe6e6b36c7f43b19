package queue

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// maxFinishBatch bounds one batch of recorded results.
const maxFinishBatch = 256

// finishReq asks the finisher to record one attempt's end.
type finishReq struct {
	fp   dialect.FinishParams
	done chan error
}

// finishLoop records attempts' ends in batches when the dialect can
// (dialect.BatchFinisher). It never waits to fill a batch: it takes what has
// arrived and writes it, and whatever arrives during that write goes in the
// next. Under load that is one round trip for many tasks; idle, one for one.
func (w *Worker) finishLoop(ctx context.Context, bf dialect.BatchFinisher, in <-chan finishReq) {
	for first := range in {
		batch := []finishReq{first}
	more:
		for len(batch) < maxFinishBatch {
			select {
			case r, ok := <-in:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		ps := make([]dialect.FinishParams, len(batch))
		for i, r := range batch {
			ps[i] = r.fp
		}
		fctx, cancel := w.stmtCtx(ctx)
		res, err := bf.TaskFinishMany(fctx, ps)
		err = w.stmtErr(fctx, ctx, fmt.Sprintf("record the end of %d tasks", len(ps)), err)
		cancel()
		if err == nil {
			w.advance(res.Advance)
		}
		for i, r := range batch {
			switch {
			case err != nil:
				r.done <- err
			case !res.Held[i]:
				r.done <- dialect.ErrLeaseLost
			default:
				r.done <- nil
			}
		}
	}
}

// finish records an attempt's end: through the batching finisher when there is
// one (successes and hand-backs apart: see Worker.handBacks), otherwise
// directly.
func (w *Worker) finish(ctx context.Context, fp dialect.FinishParams) error {
	defer w.cfg.Metrics.timeFinish()()
	if w.finishes == nil {
		if err := w.d.TaskFinish(ctx, w.d.DB(), fp); err != nil {
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
