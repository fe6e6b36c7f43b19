package postgres

import (
	"context"
	"fmt"
)

// vacuumTasksSQL vacuums the tasks table (dialect.TaskVacuumer). SKIP_LOCKED:
// when another vacuum holds the table (autovacuum, another worker's), this
// one returns at once instead of queueing behind it. INDEX_CLEANUP ON: the
// dead entries at the head of tasks_claim are what it is for, and with few
// dead rows in a large table PostgreSQL would otherwise skip the indexes. A
// role that does not own the table gets a warning and nothing is done; the
// migrations' owner does.
const vacuumTasksSQL = `VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON) stageq.tasks`

// VacuumTasks implements dialect.TaskVacuumer.
func (p *Postgres) VacuumTasks(ctx context.Context) error {
	if _, err := p.db.ExecContext(ctx, vacuumTasksSQL); err != nil {
		return fmt.Errorf("vacuum tasks: %w", mapErr(err))
	}
	return nil
}
