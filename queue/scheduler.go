package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// The scheduler loop every worker runs (unless WorkerConfig.NoScheduler).
//
// Exactly once per tick, however many workers race: a worker locks one due
// schedule row (FOR UPDATE SKIP LOCKED on PostgreSQL, READPAST+UPDLOCK on SQL
// Server, the database write lock of BEGIN IMMEDIATE on SQLite), enqueues the
// tick's run through the ordinary submit path and advances next_run, all in one
// transaction. A racing worker either skips the locked row or, once it is
// committed, no longer finds it due; the advance is also fenced by the next_run
// it read, and the run history's primary key (schedule, tick) refuses a second
// row for a tick. A worker killed mid-way leaves nothing: its transaction rolls
// back and another worker handles the tick.
//
// Due is judged by the database's clock only. The worker's clock (cfg.Clock)
// only times its sleep between passes, as a duration the database computed, so
// workers whose clocks are minutes apart still agree on every tick.
const (
	// schedulerIdle bounds the sleep when nothing is due soon, so that schedules
	// added or resumed by an operator are noticed within it.
	schedulerIdle = 5 * time.Second
	// schedulerRetry is the wait when a due schedule is held by another worker's
	// transaction (or the database failed): short, it will be done soon.
	schedulerRetry = 100 * time.Millisecond
	// schedulerBatch bounds the ticks one pass handles before sleeping again.
	schedulerBatch = 100
	// scheduleRunRetention is how long a schedule's run history is kept.
	scheduleRunRetention = 7 * 24 * time.Hour
	// scheduleSubmitTries is how many times a tick's run may fail to be enqueued
	// (an error other than invalid input) before the tick is recorded as failed
	// and the schedule moves on: the earliest due schedule is handled first, so
	// one that always fails would otherwise hold back every schedule after it.
	scheduleSubmitTries = 3
)

// errScheduleSkipped means fireOne set a broken schedule aside (paused it, or
// recorded its tick as failed): nothing was enqueued, and the loop goes on to
// the next due schedule at once.
var errScheduleSkipped = errors.New("schedule set aside")

// schedulerLoop fires due ticks until ctx or stop ends.
func (w *Worker) schedulerLoop(ctx, stop context.Context, pass func()) {
	clock := w.cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	log := w.log.With().Str("component", "scheduler").Logger()
	c := &Client{d: w.d, log: w.log}
	failures := map[int64]int{} // schedule id -> submit failures of its due tick
	retry := schedulerRetry     // grows while errors repeat, so a failing database is not hammered
	for {
		if ctx.Err() != nil || stop.Err() != nil {
			return
		}
		// Ask first (a read) and open a write transaction only when something is
		// due: on SQLite every write transaction takes the database's write lock.
		wait := schedulerIdle
		due, has, err := w.d.ScheduleNextDue(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil || stop.Err() != nil {
				return
			}
			log.Warn().Err(err).Dur("retry_in", retry).Msg("reading the next due schedule failed")
			wait, retry = retry, min(retry*2, schedulerIdle)
		case has && due <= 0:
			fired, err := w.fireDue(ctx, c, failures)
			if err != nil {
				if ctx.Err() != nil || stop.Err() != nil {
					return
				}
				log.Error().Err(err).Dur("retry_in", retry).Msg("firing a schedule failed; retrying")
				wait, retry = retry, min(retry*2, schedulerIdle)
				break
			}
			retry = schedulerRetry
			if fired > 0 {
				continue // more may be due; the next question finds out
			}
			// Due, yet nothing fired: another worker's transaction holds it.
			wait = schedulerRetry
		case has:
			retry = schedulerRetry
			// A little jitter spreads the cluster's wake-ups; the database decides
			// anyway, so it only saves contention.
			wait = min(due, schedulerIdle) + time.Duration(rand.Int64N(int64(5*time.Millisecond)))
		}
		// The wake-up is an instant on the worker's own clock, computed from a
		// duration the database gave: skew cancels out.
		wake := clock().Add(wait)
		pass()
		timer := time.NewTimer(wake.Sub(clock()))
		select {
		case <-ctx.Done():
		case <-stop.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// fireDue handles due ticks, one transaction each, up to schedulerBatch. A
// schedule set aside counts as handled: the next due one follows at once.
func (w *Worker) fireDue(ctx context.Context, c *Client, failures map[int64]int) (int, error) {
	fired := 0
	for fired < schedulerBatch {
		ok, err := w.fireOne(ctx, c, failures)
		if errors.Is(err, errScheduleSkipped) {
			ok, err = true, nil
		}
		if err != nil || !ok {
			return fired, err
		}
		fired++
	}
	return fired, nil
}

// setAside handles a due schedule that cannot be fired, in a transaction of its
// own (the one that failed is rolled back): a cron expression that no longer
// parses pauses the schedule (it has no next tick to move to; `schedule list`
// shows it paused and the log says why); a run the database refused is recorded
// as a failed tick and next_run moves on. Either way the schedules due after it
// are no longer held back.
func (w *Worker) setAside(ctx context.Context, s dialect.ScheduleInfo, d *tickDecision, cause error) error {
	log := w.log.With().Str("component", "scheduler").Str("schedule", s.Name).Logger()
	if d == nil {
		if err := w.d.ScheduleSetPaused(ctx, dialect.SchedulePauseParams{Name: s.Name, Paused: true}); err != nil {
			return fmt.Errorf("pause broken schedule %q: %w", s.Name, err)
		}
		log.Error().Err(cause).Msg("the schedule cannot compute its ticks; paused it (fix it, then `queuectl schedule resume`)")
		return errScheduleSkipped
	}
	ok, err := w.recordApart(ctx, s, *d, dialect.RunFailed, false)
	if err != nil {
		return err
	}
	if !ok {
		return errScheduleSkipped // changed meanwhile: someone else handled it
	}
	w.cfg.Metrics.tick(dialect.RunFailed)
	log.Error().Err(cause).Time("scheduled_for", d.scheduledFor).Time("next_run", d.next).
		Msg("the schedule's run could not be enqueued; tick recorded as failed")
	return errScheduleSkipped
}

// recordApart records the due tick d of s as outcome and moves next_run on, in
// a transaction of its own (the one that failed was rolled back); recorded
// means the tick has its run row already (ErrTickRecorded), and is found out
// here too. ok is false, with nothing done, when the schedule changed
// meanwhile: someone else handled it.
func (w *Worker) recordApart(ctx context.Context, s dialect.ScheduleInfo, d tickDecision, outcome string, recorded bool) (ok bool, err error) {
	tx, err := w.d.BeginTx(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	cur, now, err := w.d.ScheduleLock(ctx, tx, s.Name)
	if err != nil {
		return false, err
	}
	if !cur.NextRun.Equal(s.NextRun) || cur.Paused {
		return false, nil
	}
	err = w.d.ScheduleFire(ctx, tx, dialect.ScheduleFireParams{
		ScheduleID: s.ID, ScheduleName: s.Name, WorkerID: w.cfg.ID, ScheduledFor: d.scheduledFor,
		Outcome: outcome, Recorded: recorded, Advance: true, PrevNextRun: s.NextRun, NextRun: d.next,
		PruneBefore: now.Add(-scheduleRunRetention),
	})
	if errors.Is(err, dialect.ErrTickRecorded) && !recorded {
		tx.Rollback()
		return w.recordApart(ctx, s, d, outcome, true)
	}
	if errors.Is(err, dialect.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// fireOne handles one due tick in its own transaction; ok is false when none was
// due (or every due one is being handled by another worker).
func (w *Worker) fireOne(ctx context.Context, c *Client, failures map[int64]int) (bool, error) {
	tx, err := w.d.BeginTx(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	s, now, ok, err := w.d.ScheduleLockDue(ctx, tx)
	if err != nil || !ok {
		return false, err
	}
	spec, err := specOf(s)
	if err != nil {
		tx.Rollback()
		return false, w.setAside(ctx, s, nil, err)
	}
	d := decideTick(s, spec, now)
	if d.enqueue {
		// A plan that cannot be enqueued would fail this tick on every try and,
		// being the earliest due, hold back every schedule due after it: drop the
		// tick (recorded as missed) and advance instead.
		if _, err := decodePlan(s); err != nil {
			w.log.Error().Err(err).Str("schedule", s.Name).Time("scheduled_for", d.scheduledFor).
				Msg("the schedule's plan cannot be enqueued; tick recorded as missed")
			d.outcome, d.enqueue = dialect.RunMissed, false
		}
	}
	if d.enqueue && s.Singleton {
		busy, err := w.d.ScheduleUnfinished(ctx, tx, s.Name)
		if err != nil {
			return false, err
		}
		if busy {
			d.outcome, d.enqueue = dialect.RunSkipped, false
		}
	}
	res, err := c.fireTx(ctx, tx, s, dialect.ScheduleFireParams{
		ScheduleID: s.ID, ScheduleName: s.Name, WorkerID: w.cfg.ID, ScheduledFor: d.scheduledFor,
		Outcome: d.outcome, Advance: true, PrevNextRun: s.NextRun, NextRun: d.next,
		PruneBefore: now.Add(-scheduleRunRetention),
	}, d.enqueue)
	if errors.Is(err, dialect.ErrTickRecorded) {
		// We hold the schedule, so no other worker fired this tick: a run-now
		// recorded at its very instant did. Every fire of it would meet that row,
		// and the earliest due schedule first would hold back every later one:
		// count that run as the tick's and move on.
		tx.Rollback()
		ok, err := w.recordApart(ctx, s, d, dialect.RunManual, true)
		if err != nil || !ok {
			return false, err
		}
		delete(failures, s.ID) // the tick is done with: the next one starts afresh
		w.log.Warn().Str("schedule", s.Name).Time("scheduled_for", d.scheduledFor).Time("next_run", d.next).
			Msg("the tick already has a run (a run-now at that very instant); counted as its run")
		return false, errScheduleSkipped
	}
	if errors.Is(err, dialect.ErrConflict) {
		// Someone else handled it: not an error, and nothing of ours commits.
		return false, nil
	}
	var submitErr submitError
	if errors.As(err, &submitErr) && ctx.Err() == nil {
		failures[s.ID]++
		if errors.Is(err, dialect.ErrInvalid) || errors.Is(err, stages.ErrInvalidPlan) || failures[s.ID] >= scheduleSubmitTries {
			delete(failures, s.ID)
			tx.Rollback()
			return false, w.setAside(ctx, s, &d, err)
		}
	}
	if err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	delete(failures, s.ID)
	w.cfg.Metrics.tick(d.outcome)
	ev := w.log.Info()
	if d.outcome == dialect.RunMissed || d.outcome == dialect.RunSkipped {
		ev = w.log.Warn()
	}
	ev.Str("schedule", s.Name).Time("scheduled_for", d.scheduledFor).Str("outcome", d.outcome).
		Int("tasks", len(res.TaskIDs)).Time("next_run", d.next).Msg("schedule tick")
	return true, nil
}
