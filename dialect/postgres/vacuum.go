package postgres

import (
	"context"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// vacuumTasksSQL vacuums the tasks table (dialect.TaskVacuumer).
//   - SKIP_LOCKED: when another vacuum holds the table (autovacuum, another
//     worker's), this one returns at once instead of queueing behind it.
//   - INDEX_CLEANUP ON: the dead entries at the head of tasks_claim are what it
//     is for, and with few dead rows in a large table PostgreSQL would
//     otherwise leave the indexes alone.
//   - TRUNCATE false: giving empty pages at the table's end back to the
//     operating system takes an ACCESS EXCLUSIVE lock, which would stop every
//     claim while it is held; autovacuum still does that, at its own pace.
//
// All three are PostgreSQL 12's.
const vacuumTasksSQL = `VACUUM (SKIP_LOCKED, INDEX_CLEANUP ON, TRUNCATE false) stageq.tasks`

// mayVacuumTasksSQL: may this role vacuum stageq.tasks? A role the table's
// owner's rights reach, a superuser, the database's owner, or (PostgreSQL
// 17) a holder of MAINTAIN on it. Anyone else gets only a warning from
// VACUUM, which the driver drops. Read from the catalogs, which every role
// may read.
const mayVacuumTasksSQL = `
SELECT pg_has_role(current_user, c.relowner, 'USAGE')
    OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
    OR pg_has_role(current_user, (SELECT datdba FROM pg_database WHERE datname = current_database()), 'USAGE')
    OR CASE WHEN current_setting('server_version_num')::int >= 170000
            THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'stageq' AND c.relname = 'tasks'`

// VacuumTasks implements dialect.TaskVacuumer.
func (p *Postgres) VacuumTasks(ctx context.Context) error {
	var may bool
	if err := p.db.QueryRowContext(ctx, mayVacuumTasksSQL).Scan(&may); err != nil {
		return fmt.Errorf("vacuum tasks: may this role: %w", mapErr(err))
	}
	if !may {
		return fmt.Errorf("vacuum tasks: %w (it must own stageq.tasks or the database, be a superuser, or hold MAINTAIN on it)", dialect.ErrVacuumNotAllowed)
	}
	if _, err := p.db.ExecContext(ctx, vacuumTasksSQL); err != nil {
		return fmt.Errorf("vacuum tasks: %w", mapErr(err))
	}
	return nil
}
