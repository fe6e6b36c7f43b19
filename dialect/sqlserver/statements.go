package sqlserver

// statement is one T-SQL batch this package can send, for review and for
// statements_test.go, which checks every entry: each @p parameter is copied once
// into a local of an explicit type and size, claim-path reads carry UPDLOCK,
// READPAST, ROWLOCK and READCOMMITTEDLOCK, and the Go code sends no SQL that is
// not a constant listed here. docs/sqlserver.md describes each one's locks.
type statement struct {
	name string
	sql  string
	// lockingRead marks statements whose reads decide what a worker may take or
	// hold (the claim, a due schedule): they must lock as they read and skip rows
	// others hold.
	lockingRead bool
	// byInstaller marks the statements package routines sends, through
	// dialect.RoutineSQL, with arguments named by RoutineSQL.Arg.
	byInstaller bool
}

// statements lists every batch, in the order docs/sqlserver.md describes them.
var statements = []statement{
	{name: "create schema", sql: createSchemaSQL},
	{name: "schema table", sql: schemaTableSQL},
	{name: "schema version", sql: schemaVersionSQL},
	{name: "schema floor table", sql: schemaFloorTableSQL},
	{name: "schema floor", sql: schemaFloorSQL},
	{name: "routines lock", byInstaller: true, sql: routinesLockSQL},
	{name: "routines lock, shared", byInstaller: true, sql: routinesLockSharedSQL},
	{name: "routines list", byInstaller: true, sql: routinesListSQL},
	{name: "routines record", byInstaller: true, sql: routinesRecordSQL},
	{name: "routines forget", byInstaller: true, sql: routinesForgetSQL},
	{name: "routines in use", byInstaller: true, sql: routinesInUseSQL},
	{name: "routines create schema", sql: routinesCreateSchemaSQL},
	{name: "routines drop schema", sql: routinesDropSchemaSQL},
	{name: "compatibility level", sql: compatLevelSQL},
	{name: "OPENJSON probe", sql: openJSONProbeSQL},
	{name: "begin", sql: beginTxSQL},
	{name: "submit", sql: submitSQL},
	{name: "claim", sql: claimSQL, lockingRead: true},
	{name: "finish", sql: finishSQL},
	{name: "finish many", sql: finishManySQL},
	{name: "advance", sql: advanceSQL},
	{name: "atomic body", sql: atomicBodySQL},
	{name: "extend", sql: extendSQL},
	{name: "rescue", sql: rescueSQL},
	{name: "body session", sql: bodySessionSQL},
	{name: "worker register", sql: workerRegisterSQL},
	{name: "worker heartbeat", sql: workerHeartbeatSQL},
	{name: "worker stop", sql: workerStopSQL},
	{name: "log list", sql: logListSQL},
	{name: "log list, newest", sql: logListNewestSQL},
	{name: "task list", sql: taskListSQL},
	{name: "process get", sql: processGetSQL},
	{name: "clock now", sql: clockNowSQL},
	{name: "schedule create", sql: scheduleCreateSQL},
	{name: "schedule list", sql: scheduleListSQL},
	{name: "schedule pause", sql: schedulePauseSQL},
	{name: "schedule delete", sql: scheduleDeleteSQL},
	{name: "schedule lock due", sql: scheduleLockDueSQL, lockingRead: true},
	{name: "schedule lock", sql: scheduleLockSQL},
	{name: "schedule unfinished", sql: scheduleUnfinishedSQL},
	{name: "schedule tag", sql: scheduleTagSQL},
	{name: "schedule run", sql: scheduleRunSQL},
	{name: "schedule advance", sql: scheduleAdvanceSQL},
	{name: "schedule touch", sql: scheduleTouchSQL},
	{name: "schedule prune runs", sql: schedulePruneRunsSQL},
	{name: "schedule next due", sql: scheduleNextDueSQL},
	{name: "schedule run list", sql: scheduleRunListSQL},
	{name: "lease acquire", sql: leaseAcquireSQL},
	{name: "lease get", sql: leaseGetSQL},
	{name: "lease extend", sql: leaseExtendSQL},
	{name: "lease release", sql: leaseReleaseSQL},
	{name: "lease list", sql: leaseListSQL},
	{name: "lock process", sql: lockProcessSQL},
	{name: "lock process by id", sql: lockProcessByIDSQL},
	{name: "pause", sql: pauseSQL},
	{name: "audit failed", sql: auditFailedSQL},
	{name: "retry process", sql: retryProcessSQL},
	{name: "discard process", sql: discardProcessSQL},
	{name: "cancel process", sql: cancelProcessSQL},
	{name: "running", sql: runningSQL},
	{name: "task process", sql: taskProcessSQL},
	{name: "task lock", sql: taskLockSQL},
	{name: "audit task", sql: auditTaskSQL},
	{name: "retry task", sql: retryTaskSQL},
	{name: "delete task", sql: deleteTaskSQL},
	{name: "open stage", sql: openStageSQL},
	{name: "configure", sql: configureSQL},
	{name: "process list", sql: processListSQL},
	{name: "stage count", sql: stageCountSQL},
	{name: "stage done", sql: stageDoneSQL},
	{name: "worker list", sql: workerListSQL},
	{name: "limit upsert", sql: limitUpsertSQL},
	{name: "limit list", sql: limitListSQL},
	{name: "limit delete", sql: limitDeleteSQL},
	{name: "task wait", sql: taskWaitSQL},
	{name: "state count", sql: stateCountSQL},
	{name: "prune logs", sql: pruneLogsSQL},
	{name: "prune workers", sql: pruneWorkersSQL},
	{name: "prune processes", sql: pruneProcessesSQL},
	{name: "prune record", sql: pruneRecordSQL},
	{name: "prune last", sql: pruneLastSQL},
}
