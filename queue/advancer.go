package queue

import (
	"context"
	"slices"
	"time"

	"github.com/stageq/stageq/dialect"
)

// advanceRetry is how soon a stage advance is tried again when its process row
// was held by another transaction (an open submission, an operator's command).
const advanceRetry = 50 * time.Millisecond

// advanceRetryMax bounds the backoff of a stage advance that failed (the
// database is down, restarting or unreachable): from advanceRetry, doubling.
// The rescue pass repairs a stage left unadvanced meanwhile.
const advanceRetryMax = 5 * time.Second

// advance hands processes whose stage a committed completion may have ended to
// the advancer (dialect.StageAdvancer). It never blocks the caller: the
// completion is recorded already, and the rescue pass of any worker repairs a
// stage whose advance was lost.
func (w *Worker) advance(processIDs []int64) {
	if w.advances == nil || len(processIDs) == 0 {
		return
	}
	select {
	case w.advances <- processIDs:
	default:
		w.log.Warn().Int("processes", len(processIDs)).Msg("stage advances are backed up; the rescue pass will advance these")
	}
}

// advanceLoop moves processes to their next stage once the completions that
// may have ended their stage have committed, apart from the finisher so that
// recording results never waits for it. A process whose row is busy is tried
// again every advanceRetry until it can be locked; an advance that failed is
// tried again after a backoff (advanceRetryMax). When in closes, what is left
// is tried for a last second.
func (w *Worker) advanceLoop(ctx context.Context, sa dialect.StageAdvancer, in <-chan []int64) {
	var pending []int64
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	backoff := advanceRetry // the wait after a failed advance: doubles while they fail
	try := func() {
		slices.Sort(pending)
		pending = slices.Compact(pending)
		actx, cancel := w.stmtCtx(ctx)
		busy, err := sa.StagesAdvance(actx, pending)
		err = w.stmtErr(actx, ctx, "advance stages", err)
		cancel()
		wait := advanceRetry
		if err != nil {
			wait, backoff = backoff, min(backoff*2, advanceRetryMax)
			w.log.Warn().Err(err).Int("processes", len(pending)).Dur("retry_in", wait).Msg("could not advance stages; trying again")
		} else {
			backoff = advanceRetry
		}
		pending = busy
		if len(pending) > 0 {
			retry.Reset(wait)
		}
	}
	for {
		select {
		case ids, ok := <-in:
			if !ok {
				deadline := time.Now().Add(time.Second)
				for len(pending) > 0 && time.Now().Before(deadline) {
					if try(); len(pending) > 0 {
						time.Sleep(advanceRetry)
					}
				}
				return
			}
			pending = append(pending, ids...)
		more:
			for { // take whatever else has arrived: one statement for all of it
				select {
				case ids, ok := <-in:
					if !ok {
						break more
					}
					pending = append(pending, ids...)
				default:
					break more
				}
			}
			try()
		case <-retry.C:
			if len(pending) > 0 {
				try()
			}
		}
	}
}
