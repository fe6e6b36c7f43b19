package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
)

// runTask runs one attempt and records how it ended. It calls bodyDone when the
// body has ended, before the end is recorded, to give the slot back.
func (w *Worker) runTask(ctx context.Context, a attempt, bodyDone func()) {
	t := a.ClaimedTask
	// The attempt's fields go on each event rather than on a derived logger:
	// a disabled level's event is nil and adds nothing, where a derived
	// logger encodes every field for every attempt, logged or not (0.8 µs of
	// the worker's 17 µs of CPU per task in a no-op drain's profile).
	log := func(e *zerolog.Event) *zerolog.Event {
		return e.Int64("task_id", t.ID).Str("process", t.Process).Int("stage", t.Order).
			Int("attempt", t.Attempt).Str("kind", t.Kind)
	}
	log(w.log.Debug()).Msg("task started")
	began := time.Now()

	finished, runErr := w.execute(ctx, a)
	bodyDone()
	if finished {
		w.cfg.Metrics.ended(t, dialect.OutcomeSucceeded, time.Since(began))
		// Its end committed with the body (an atomic task): logged as every
		// other end is, for a filter on "task ended".
		log(w.log.Info()).Str("outcome", string(dialect.OutcomeSucceeded)).Dur("took", time.Since(began)).Msg("task ended")
		return
	}

	fp := dialect.FinishParams{TaskID: t.ID, Token: t.Token, ProcessID: t.ProcessID}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errLeaseLost) || errors.As(runErr, new(attemptLostError)):
		// The second: the body's start found the attempt already rescued, so
		// the body never ran, or an atomic body's completion found it gone
		// and rolled back: either way there is no result to record. Only
		// the worker's own checks mark that: a handler's error that wraps
		// dialect.ErrLeaseLost (lease.ErrLost, from a lease of its own) is
		// the task's failure, recorded like any other.
		w.cfg.Metrics.ended(t, dialect.OutcomeAbandoned, time.Since(began))
		log(w.log.Warn()).Msg("lease lost while running; another worker owns the task now, result dropped")
		return
	case runErr != nil && errors.Is(cause, errShutdown):
		fp.Outcome = dialect.OutcomeReleased
		fp.Error = "released at worker shutdown: " + runErr.Error()
	case runErr == nil:
		fp.Outcome = dialect.OutcomeSucceeded
	case errors.As(runErr, new(releaseError)):
		fp.Outcome = dialect.OutcomeReleased
		fp.Error = "released before it started: " + runErr.Error()
	case errors.As(runErr, new(abandonError)):
		fp.Outcome = dialect.OutcomeAbandoned
		fp.Error = runErr.Error()
	default:
		fp.Outcome = dialect.OutcomeFailed
		fp.Error = runErr.Error()
		// Abandoned attempts (lost to a dead worker or connection) are not
		// the task's own: they have a budget of their own.
		if charged := t.Attempt - t.Abandons; !isNoRetry(runErr) && charged < t.MaxAttempts {
			fp.RetryAfter = retryDelay(charged, w.cfg.RetryBase, w.cfg.RetryMax)
		}
	}

	if (fp.Outcome == dialect.OutcomeReleased || fp.Outcome == dialect.OutcomeAbandoned) &&
		!errors.As(runErr, new(unstartedError)) && !w.bodyEnded(ctx, t) {
		w.cfg.Metrics.ended(t, dialect.OutcomeAbandoned, time.Since(began))
		log(w.log.Warn()).Str("outcome", string(fp.Outcome)).
			Msg("the body may still run in its database session; the task is left to the rescue once its lease expires")
		return
	}
	if err := w.finishRetrying(ctx, fp); err != nil {
		w.cfg.Metrics.ended(t, dialect.OutcomeAbandoned, time.Since(began))
		if errors.Is(err, dialect.ErrLeaseLost) {
			log(w.log.Warn()).Msg("lease lost before the result was recorded; another worker owns the task now")
			return
		}
		// The attempt leaves this worker's running set, so its lease is no
		// longer extended: it expires and the task runs again (at-least-once).
		log(w.log.Error()).Err(err).Msg("could not record the task's end; it will run again once its lease expires")
		return
	}
	w.cfg.Metrics.ended(t, fp.Outcome, time.Since(began))
	var ev *zerolog.Event
	if fp.Outcome != dialect.OutcomeFailed {
		ev = log(w.log.Info())
	} else {
		ev = log(w.log.Warn()).Str("error", fp.Error)
		if fp.RetryAfter > 0 {
			ev = ev.Dur("retry_in", fp.RetryAfter)
		} else {
			ev = ev.Bool("final", true)
		}
	}
	ev.Str("outcome", string(fp.Outcome)).Dur("took", time.Since(began)).Msg("task ended")
}

// bodyEndWait bounds how long a hand-back waits for its body's session to end.
const bodyEndWait = 5 * time.Second

// bodyEnded makes sure an SQL body that the worker stopped waiting for no
// longer runs in the database before its task is handed back to run again at
// once (dialect.BodyEnder): a body cancelled at shutdown, or cut off from this
// worker with its connection, can go on in its session. False when that could
// not be made sure; the task then waits for its lease to expire, and the
// rescue ends the body first.
func (w *Worker) bodyEnded(ctx context.Context, t dialect.ClaimedTask) bool {
	be, ok := w.d.(dialect.BodyEnder)
	if !ok || t.Kind != KindSQL || t.Atomic || w.cfg.TargetDB != nil {
		// Atomic bodies run in the transaction that holds the task's row:
		// no one can take the task until that has ended.
		return true
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bodyEndWait)
	defer cancel()
	gone, err := be.EndBody(ectx, dialect.TaskLease{ID: t.ID, Token: t.Token})
	if err != nil {
		w.log.Warn().Err(err).Int64("task_id", t.ID).Msg("could not make sure the body stopped")
	}
	return gone
}

// finishRetrying records an attempt's end, trying again on errors that may pass
// (a dropped connection, a deadlock victim, a timeout) for up to half a lease,
// while the lease is still being extended.
func (w *Worker) finishRetrying(ctx context.Context, fp dialect.FinishParams) error {
	giveUp := time.Now().Add(w.cfg.Lease / 2)
	wait := 50 * time.Millisecond
	for {
		// Recording the end must happen even when the task's own context was
		// cancelled; the statement timeout bounds it (in finish).
		err := w.finish(context.WithoutCancel(ctx), fp)
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
func (w *Worker) execute(ctx context.Context, a attempt) (finished bool, err error) {
	t := a.ClaimedTask
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
	if bs, ok := w.d.(dialect.BodySessioner); ok && w.cfg.TargetDB == nil {
		// The body is made findable before it starts, so that if this worker
		// dies the rescue of its lease ends the body first.
		conn, text, err := w.bodyConn(ctx, bs, a)
		if err != nil {
			return false, unstartedError{err}
		}
		defer conn.Close()
		if t.Atomic {
			finished, err = w.executeAtomic(ctx, t, conn, text)
		} else {
			_, err = conn.ExecContext(ctx, text)
		}
		// Asked before any discard below: a discarded connection never
		// answers, and a body's own error that looks like a lost connection
		// would be recorded as one.
		if err != nil && ctx.Err() == nil && dialect.ConnLost(err) && !connAlive(ctx, conn) {
			dialect.DiscardConn(conn)
			return false, abandonError{fmt.Errorf("the body's database connection was lost while the body ran: %w", err)}
		}
		if t.Atomic && !finished {
			// The session keeps this attempt's name (dialect.BodyStart.Atomic),
			// and the attempt's end is recorded elsewhere, if at all: should it
			// never be, the rescue of its lease would look for the name and
			// find whatever body this connection runs next. Not reused.
			dialect.DiscardConn(conn)
		}
		return finished, err
	}
	if t.Atomic {
		return w.executeAtomic(ctx, t, nil, t.Body)
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
// recorded done, and a crash or a lost lease rolls both back. conn, when not
// nil, is the body's connection and text the body as BodyConn returned it
// (dialect.BodySessioner).
func (w *Worker) executeAtomic(ctx context.Context, t dialect.ClaimedTask, conn *sql.Conn, text string) (bool, error) {
	if w.cfg.TargetDB != nil {
		return false, NoRetry(errors.New("atomic tasks run on the queue database; this worker runs SQL on a separate target"))
	}
	var tx *sql.Tx
	var err error
	if conn != nil {
		tx, err = conn.BeginTx(ctx, nil)
	} else {
		tx, err = w.d.BeginTx(ctx)
	}
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if ae, ok := w.d.(dialect.AtomicExecer); ok {
		err = ae.TaskExecAtomic(ctx, tx, text)
	} else {
		_, err = tx.ExecContext(ctx, text)
	}
	if errors.Is(err, dialect.ErrBodyEndedTx) {
		return false, NoRetry(err)
	}
	if err != nil {
		return false, err
	}
	err = w.d.TaskFinish(ctx, tx, dialect.FinishParams{TaskID: t.ID, Token: t.Token, Outcome: dialect.OutcomeSucceeded})
	if errors.Is(err, dialect.ErrLeaseLost) {
		// Rolled back by the deferred Rollback: the new holder's run counts.
		return false, attemptLostError{err}
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

// bodyConnTries bounds how many connections a body's start tries in a row
// when each one it is given turns out dead.
const bodyConnTries = 4

// bodyConn takes the connection for an SQL body and the text to run there,
// made findable by the rescue (dialect.BodySessioner). A
// connection the server already closed (the pool does not know until it is
// used: a restart, pg_terminate_backend, a cut network) fails that first
// statement, before the body ran: it is thrown away and another taken, at no
// cost to the task. When every try fails so, the attempt is abandoned, which
// its abandon budget pays for, not its attempts.
func (w *Worker) bodyConn(ctx context.Context, bs dialect.BodySessioner, a attempt) (*sql.Conn, string, error) {
	t := a.ClaimedTask
	var err error
	for try := 1; try <= bodyConnTries; try++ {
		if try > 2 {
			select { // a short pause before the third try and after
			case <-ctx.Done():
				return nil, "", ctx.Err()
			case <-time.After(time.Duration(try-1) * 50 * time.Millisecond):
			}
		}
		var conn *sql.Conn
		var text string
		sctx, cancel := w.stmtCtx(ctx)
		conn, text, err = bs.BodyConn(sctx, dialect.BodyStart{
			Lease: dialect.TaskLease{ID: t.ID, Token: t.Token}, Body: t.Body, Atomic: t.Atomic,
			LeaseHeld: func() bool { return w.leaseHeld(a) },
		})
		err = w.stmtErr(sctx, ctx, "start the body", err)
		timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			w.connPause.ok()
			return conn, text, nil
		}
		if errors.Is(err, dialect.ErrLeaseLost) {
			return nil, "", attemptLostError{err}
		}
		if ctx.Err() != nil {
			return nil, "", err
		}
		if timedOut {
			// The body never started: a database that did not answer within
			// the statement timeout is not the task's doing. (Any other error,
			// a missing permission say, is charged like a failed attempt: it
			// would fail again at once, and attempts have a backoff.)
			return nil, "", abandonError{fmt.Errorf("the body did not start: its first statement failed: %w", err)}
		}
		if errors.Is(err, dialect.ErrConnUnavailable) {
			// No connection could be opened: nothing of the body ran, and
			// another try now would meet the same refusal. The task goes back
			// uncounted, and this worker claims nothing for a while.
			pause := w.connPause.failed(time.Now())
			w.log.Warn().Err(err).Int64("task_id", t.ID).Dur("claims_pause", pause).
				Msg("no database connection for the body; handing the task back")
			return nil, "", releaseError{err}
		}
		if !dialect.ConnLost(err) {
			return nil, "", err
		}
		w.log.Warn().Err(err).Int64("task_id", t.ID).Int("try", try).Msg("a pooled connection was dead before the body started; taking another")
	}
	return nil, "", abandonError{fmt.Errorf("no live database connection for the body after %d tries: %w", bodyConnTries, err)}
}

// connAlive tells a body's own error that merely looks like a lost connection
// (a body may RAISE any SQLSTATE, 57P01 or class 08 included) from a lost
// connection: one that still answers a ping was not lost, and the error is the
// body's. The ping is bounded; a connection that cannot answer within it counts
// as lost.
func connAlive(ctx context.Context, conn *sql.Conn) bool {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return conn.PingContext(pctx) == nil
}

// abandonError is an attempt lost to infrastructure (the body's database
// connection), not to the task: it is recorded abandoned, against the task's
// abandon budget rather than its attempts.
type abandonError struct{ err error }

func (e abandonError) Error() string { return e.err.Error() }
func (e abandonError) Unwrap() error { return e.err }

// releaseError is an attempt whose body never started for want of a
// database connection: recorded released, counted neither as an attempt nor
// against the abandon budget (a database out of connection slots is not the
// task's doing, and it may last longer than ten quick abandons).
type releaseError struct{ err error }

func (e releaseError) Error() string { return e.err.Error() }
func (e releaseError) Unwrap() error { return e.err }

// unstartedError marks an attempt whose SQL body never started (its
// connection or the check before it failed): no session runs it, and a
// hand-back need not wait for one to end.
type unstartedError struct{ err error }

func (e unstartedError) Error() string { return e.err.Error() }
func (e unstartedError) Unwrap() error { return e.err }

// attemptLostError marks the worker's own finding that this attempt's lease is
// gone (the body's start, an atomic body's completion): another worker owns
// the task, and nothing is recorded. It is never inferred from the error a
// task returns, which may wrap dialect.ErrLeaseLost for a lease of its own.
type attemptLostError struct{ err error }

func (e attemptLostError) Error() string { return e.err.Error() }
func (e attemptLostError) Unwrap() error { return e.err }
