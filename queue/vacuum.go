package queue

import (
	"context"
	"time"

	"github.com/stageq/stageq/dialect"
)

// DefaultVacuumEvery is WorkerConfig.VacuumEvery's default: tasks claimed by
// one worker between vacuums of the tasks table. A vacuum of a table of a
// million tasks took tens of milliseconds here; 50,000 claims without one
// leave each claim reading a few hundred dead index pages more.
const DefaultVacuumEvery = 50_000

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
// fails is logged; the next comes after as many claims again.
func (w *Worker) vacuumLoop(ctx context.Context, tv dialect.TaskVacuumer, pass func()) {
	log := w.log.With().Str("component", "vacuum").Logger()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.vacuumDue:
		}
		began := time.Now()
		if err := tv.VacuumTasks(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn().Err(err).Msg("vacuum of the tasks table failed; the next one after as many claims again")
		} else {
			log.Debug().Dur("took", time.Since(began)).Msg("vacuumed the tasks table")
		}
		pass()
	}
}
