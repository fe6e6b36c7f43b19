package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect/sqlbase"
)

// base gives sqlbase the statements of operate.go, read.go, limits.go,
// prune.go, schedule.go and exclusive_lease.go and the steps SQLite takes its own way: one write transaction
// (BEGIN IMMEDIATE) is the lock that PostgreSQL takes on the process row,
// the stage is re-derived in Go (stage.go), and times are UTC text.
func (s *SQLite) base() sqlbase.Base {
	return sqlbase.Base{
		Pool:      s.pool(),
		InTx:      s.inTx,
		MapErr:    mapErr,
		Time:      func(t time.Time) any { return formatTime(t) },
		OpenStage: openStage,
		Configure: configure,
		PruneAge:  s.pruneCutoff,
		IsUnique:  isUnique,
		IDs: func(ids []int64) (any, error) { // SQLite has no arrays: json_each reads them
			b, err := json.Marshal(ids)
			return string(b), err
		},
		Interval:   func(d time.Duration) any { return offset(d) },
		LeasesInTx: true,
		SQL: sqlbase.Statements{
			LockProcess:     opProcessIDSQL,
			LockProcessByID: opProcessByIDSQL,
			Pause:           opPauseSQL,
			AuditFailed:     opAuditFailedSQL,
			RetryProcess:    opRetryProcessSQL,
			DiscardProcess:  opDiscardProcessSQL,
			AuditCancel:     opAuditCancelSQL,
			CancelProcess:   opCancelProcessSQL,
			Running:         opRunningSQL,
			TaskProcess:     opTaskProcessSQL,
			TaskLock:        opTaskSQL,
			AuditTask:       opAuditTaskSQL,
			RetryTask:       opRetryTaskSQL,
			DeleteTask:      opDeleteTaskSQL,
			ProcessList:     opProcessListSQL,
			StageCount:      opStageCountSQL,
			StageDone:       opStageDoneSQL,
			WorkerList:      opWorkerListSQL,
			LogList:         logListSQL,
			LogListNewest:   logListNewestSQL,
			TaskList:        taskListSQL,
			ProcessGet:      processGetSQL,
		},
		Limits: limitSQL, Retention: retentionSQL, Schedule: scheduleSQL, Lease: leaseSQL,
	}
}

// pruneCutoff is the time a retention age reaches back to on the database's
// clock, as the prune statements compare it with stored times.
func (s *SQLite) pruneCutoff(ctx context.Context, age time.Duration) (any, error) {
	var cutoff string
	mod := fmt.Sprintf("-%.3f seconds", age.Seconds())
	if err := s.pool().QueryRowContext(ctx, pruneCutoffSQL, mod).Scan(&cutoff); err != nil {
		return nil, mapErr(err)
	}
	return cutoff, nil
}
