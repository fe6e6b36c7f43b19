package queue

import (
	"context"
	"errors"
	"time"

	"github.com/stageq/stageq/dialect"
)

// DefaultVacuumEvery is WorkerConfig.VacuumEvery's default: tasks claimed by
// one worker between vacuums of the tasks table. Measured here: a vacuum of a
// table of 400,000 tasks, 100,000 of them dead, took 51 ms; 100,000 claims
// without one left each read of the claim index's head 743 pages long, so
// 50,000 leave it a few hundred.
const DefaultVacuumEvery = 50_000

// vacuumShare bounds the time vacuums take: a pass asked for sooner after
// the last one than vacuumShare times that one's length waits until then. A
// vacuum reads every index of the table whole, so on a large table the
// claims, not the vacuums, must set the pace.
const vacuumShare = 10

// vacuumWait is how long a pass asked for now waits, given how long ago the
// last one ended and how long it took (zero before the first). The request is
// delayed, not dropped: dropping it would leave the next pass another
// VacuumEvery claims away, twice the interval the worker was asked for.
func vacuumWait(sinceLastEnd, lastTook time.Duration) time.Duration {
	return max(vacuumShare*lastTook-sinceLastEnd, 0)
}

// noteClaimed counts the tasks a claim took and, every VacuumEvery of them,
// asks the vacuum service for a pass. Called by the claim loop only.
func (w *Worker) noteClaimed(n int) {
	if w.vacuumDue == nil || n == 0 {
		return
	}
	w.claimedSinceVacuum += n
	if w.claimedSinceVacuum >= w.cfg.VacuumEvery {
		w.claimedSinceVacuum = 0
		signal(w.vacuumDue)
	}
}

// vacuumLoop vacuums the tasks table each time the claim loop asks
// (dialect.TaskVacuumer), one pass at a time, until ctx ends. A pass that
// fails is logged and the next comes after as many claims again; a role that
// may not vacuum the table stops the service, saying so once.
func (w *Worker) vacuumLoop(ctx context.Context, tv dialect.TaskVacuumer, pass func()) {
	log := w.log.With().Str("component", "vacuum").Logger()
	var lastEnd time.Time
	var lastTook time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.vacuumDue:
		}
		if wait := vacuumWait(time.Since(lastEnd), lastTook); wait > 0 {
			// The last pass was long: let the claims run, then vacuum.
			// Requests made meanwhile fold into this pass (vacuumDue holds one).
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		began := time.Now()
		err := tv.VacuumTasks(ctx)
		lastEnd, lastTook = time.Now(), time.Since(began)
		switch {
		case err == nil:
			log.Debug().Dur("took", lastTook).Msg("vacuumed the tasks table")
		case ctx.Err() != nil:
			return
		case errors.Is(err, dialect.ErrVacuumNotAllowed):
			log.Warn().Err(err).Msg("not vacuuming the tasks table; claims will slow down between autovacuum's visits")
			return
		default:
			log.Warn().Err(err).Msg("vacuum of the tasks table failed; the next one after as many claims again")
		}
		pass()
	}
}
