package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/stageq/stageq/dialect"
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
)

// schedulerLoop fires due ticks until ctx or stop ends.
func (w *Worker) schedulerLoop(ctx, stop context.Context) {
	clock := w.cfg.Clock
	if clock == nil {
		clock = time.Now
	}
	log := w.log.With().Str("component", "scheduler").Logger()
	c := &Client{d: w.d, log: w.log}
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
			log.Warn().Err(err).Msg("reading the next due schedule failed")
			wait = schedulerRetry
		case has && due <= 0:
			fired, err := w.fireDue(ctx, c)
			if err != nil {
				if ctx.Err() != nil || stop.Err() != nil {
					return
				}
				log.Error().Err(err).Msg("firing a schedule failed; retrying")
			}
			if fired > 0 && err == nil {
				continue // more may be due; the next question finds out
			}
			// Due, yet nothing fired: another worker's transaction holds it.
			wait = schedulerRetry
		case has:
			// A little jitter spreads the cluster's wake-ups; the database decides
			// anyway, so it only saves contention.
			wait = min(due, schedulerIdle) + time.Duration(rand.Int64N(int64(5*time.Millisecond)))
		}
		// The wake-up is an instant on the worker's own clock, computed from a
		// duration the database gave: skew cancels out.
		wake := clock().Add(wait)
		timer := time.NewTimer(wake.Sub(clock()))
		select {
		case <-ctx.Done():
		case <-stop.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// fireDue handles due ticks, one transaction each, up to schedulerBatch.
func (w *Worker) fireDue(ctx context.Context, c *Client) (int, error) {
	fired := 0
	for fired < schedulerBatch {
		ok, err := w.fireOne(ctx, c)
		if err != nil || !ok {
			return fired, err
		}
		fired++
	}
	return fired, nil
}

// fireOne handles one due tick in its own transaction; ok is false when none was
// due (or every due one is being handled by another worker).
func (w *Worker) fireOne(ctx context.Context, c *Client) (bool, error) {
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
		return false, err
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
	if errors.Is(err, dialect.ErrConflict) {
		// Someone else handled it: not an error, and nothing of ours commits.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	w.cfg.Metrics.tick(d.outcome)
	ev := w.log.Info()
	if d.outcome == dialect.RunMissed || d.outcome == dialect.RunSkipped {
		ev = w.log.Warn()
	}
	ev.Str("schedule", s.Name).Time("scheduled_for", d.scheduledFor).Str("outcome", d.outcome).
		Int("tasks", len(res.TaskIDs)).Time("next_run", d.next).Msg("schedule tick")
	return true, nil
}
