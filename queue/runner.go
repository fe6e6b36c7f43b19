package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// finishTimeout bounds recording an attempt's end, which must happen even when
// the task's own context was cancelled.
const finishTimeout = 30 * time.Second

// runTask runs one attempt and records how it ended. It calls bodyDone when the
// body has ended, before the end is recorded, to give the slot back.
func (w *Worker) runTask(ctx context.Context, t dialect.ClaimedTask, bodyDone func()) {
	log := w.log.With().Int64("task_id", t.ID).Str("process", t.Process).Int("stage", t.Order).
		Int("attempt", t.Attempt).Str("kind", t.Kind).Logger()
	log.Debug().Msg("task started")
	began := time.Now()

	finished, runErr := w.execute(ctx, t)
	bodyDone()
	if finished {
		w.cfg.Metrics.ended(t, dialect.OutcomeSucceeded, time.Since(began))
		log.Info().Dur("took", time.Since(began)).Msg("task succeeded")
		return
	}

	fp := dialect.FinishParams{TaskID: t.ID, Token: t.Token, ProcessID: t.ProcessID}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errLeaseLost):
		w.cfg.Metrics.ended(t, dialect.OutcomeAbandoned, time.Since(began))
		log.Warn().Msg("lease lost while running; another worker owns the task now, result dropped")
		return
	case runErr != nil && errors.Is(cause, errShutdown):
		fp.Outcome = dialect.OutcomeReleased
		fp.Error = "released at worker shutdown: " + runErr.Error()
	case runErr == nil:
		fp.Outcome = dialect.OutcomeSucceeded
	default:
		fp.Outcome = dialect.OutcomeFailed
		fp.Error = runErr.Error()
		if !isNoRetry(runErr) && t.Attempt < t.MaxAttempts {
			fp.RetryAfter = retryDelay(t.Attempt, w.cfg.RetryBase, w.cfg.RetryMax)
		}
	}

	if err := w.finishRetrying(ctx, fp); err != nil {
		w.cfg.Metrics.ended(t, dialect.OutcomeAbandoned, time.Since(began))
		if errors.Is(err, dialect.ErrLeaseLost) {
			log.Warn().Msg("lease lost before the result was recorded; another worker owns the task now")
			return
		}
		// The attempt leaves this worker's running set, so its lease is no
		// longer extended: it expires and the task runs again (at-least-once).
		log.Error().Err(err).Msg("could not record the task's end; it will run again once its lease expires")
		return
	}
	w.cfg.Metrics.ended(t, fp.Outcome, time.Since(began))
	ev := log.Info()
	if fp.Outcome == dialect.OutcomeFailed {
		ev = log.Warn().Str("error", fp.Error)
		if fp.RetryAfter > 0 {
			ev = ev.Dur("retry_in", fp.RetryAfter)
		} else {
			ev = ev.Bool("final", true)
		}
	}
	ev.Str("outcome", string(fp.Outcome)).Dur("took", time.Since(began)).Msg("task ended")
}

// finishRetrying records an attempt's end, trying again on errors that may pass
// (a dropped connection, a deadlock victim, a timeout) for up to half a lease,
// while the lease is still being extended.
func (w *Worker) finishRetrying(ctx context.Context, fp dialect.FinishParams) error {
	giveUp := time.Now().Add(w.cfg.Lease / 2)
	wait := 50 * time.Millisecond
	for {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		err := w.finish(fctx, fp)
		cancel()
		if err == nil || errors.Is(err, dialect.ErrLeaseLost) || errors.Is(err, dialect.ErrInvalid) ||
			time.Now().Add(wait).After(giveUp) {
			return err
		}
		w.log.Warn().Err(err).Int64("task_id", fp.TaskID).Dur("retry_in", wait).Msg("recording the task's end failed; trying again")
		time.Sleep(wait)
		wait *= 2
	}
}

// execute runs the task's body. finished reports that the attempt's success was
// already recorded (atomic tasks commit their body and completion together).
func (w *Worker) execute(ctx context.Context, t dialect.ClaimedTask) (finished bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			finished, err = false, panicError(r)
		}
	}()
	if t.Kind == KindExec {
		return false, w.executeCommand(ctx, t.Body)
	}
	if t.Kind != KindSQL {
		h, ok := w.handlers[t.Kind]
		if !ok {
			return false, fmt.Errorf("no handler for kind %q on worker %s", t.Kind, w.cfg.ID)
		}
		return false, h(ctx, &Task{ID: t.ID, Process: t.Process, Order: t.Order, Kind: t.Kind,
			Body: t.Body, Attempt: t.Attempt, MaxAttempts: t.MaxAttempts})
	}
	if t.Atomic {
		return w.executeAtomic(ctx, t)
	}
	db := w.cfg.TargetDB
	if db == nil {
		db = w.d.DB()
	}
	_, err = db.ExecContext(ctx, t.Body)
	return false, err
}

// executeAtomic runs an SQL body and the task's completion in one transaction on
// the queue database: the body's effects commit exactly when the task is
// recorded done, and a crash or a lost lease rolls both back.
func (w *Worker) executeAtomic(ctx context.Context, t dialect.ClaimedTask) (bool, error) {
	if w.cfg.TargetDB != nil {
		return false, NoRetry(errors.New("atomic tasks run on the queue database; this worker runs SQL on a separate target"))
	}
	tx, err := w.d.BeginTx(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if ae, ok := w.d.(dialect.AtomicExecer); ok {
		err = ae.TaskExecAtomic(ctx, tx, t.Body)
	} else {
		_, err = tx.ExecContext(ctx, t.Body)
	}
	if err != nil {
		return false, err
	}
	err = w.d.TaskFinish(ctx, tx, dialect.FinishParams{TaskID: t.ID, Token: t.Token, Outcome: dialect.OutcomeSucceeded})
	if errors.Is(err, dialect.ErrLeaseLost) {
		// Rolled back by the deferred Rollback: the new holder's run counts.
		return false, err
	}
	if err != nil {
		return false, fmt.Errorf("record completion: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	w.advance([]int64{t.ProcessID})
	return true, nil
}
