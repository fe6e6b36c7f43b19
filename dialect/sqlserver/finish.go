package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// finishSQL calls stageq.Finish, which checks the fence (lease token), locks the
// process row, ends the attempt in Tasks and Logs, and opens the next stage when
// this was the last task of the current one. In: task id, token, outcome, error
// text (empty for none), retry delay in ms (0: failed for good), and the
// @@TRANCOUNT the caller's Querier implies (0 on the pool, 1 in a transaction
// from BeginTx, -1 unknown). Out: whether the token still held the task.
//
// The @@TRANCOUNT check is the guard for atomic tasks: a body that left a
// transaction open shows up as one level too many, and the batch refuses to
// finish (THROW 50010; XACT_ABORT then rolls everything back, body included).
const finishSQL = `
SET NOCOUNT ON;
DECLARE @TaskId bigint = @pTaskId,
        @Token bigint = @pToken,
        @Outcome varchar(20) = @pOutcome,
        @Error nvarchar(max) = @pError,
        @RetryMs bigint = @pRetryMs,
        @ExpectTranCount int = @pExpectTranCount,
        @Held bit = 0,
        @Msg nvarchar(2048);
IF @ExpectTranCount >= 0 AND @@TRANCOUNT <> @ExpectTranCount
BEGIN
    SET @Msg = CONCAT(N'stageq: cannot finish task ', @TaskId, N': @@TRANCOUNT is ', @@TRANCOUNT,
                      N', expected ', @ExpectTranCount,
                      N' (the task body began, committed or rolled back a transaction)');
    THROW 50010, @Msg, 1;
END;
IF LEN(@Error) = 0 SET @Error = NULL;
IF @RetryMs <= 0 SET @RetryMs = NULL;
EXEC stageq.Finish @TaskId = @TaskId, @Token = @Token, @Outcome = @Outcome, @Error = @Error,
     @RetryMs = @RetryMs, @Held = @Held OUTPUT;
SELECT @Held;`

// TaskFinish implements dialect.Dialect. On the pool it is retried only after
// errors that guarantee nothing was committed (a retry after a commit whose answer
// was lost would report ErrLeaseLost for a finish that happened).
func (d *SQLServer) TaskFinish(ctx context.Context, q dialect.Querier, fp dialect.FinishParams) error {
	var retryMs int64
	if fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0 {
		retryMs = millis(fp.RetryAfter)
	}
	expect := int32(-1)
	switch q.(type) {
	case *sql.DB:
		expect = 0
	case *sql.Tx:
		expect = 1
	}
	var held bool
	run := func(ctx context.Context) error {
		return q.QueryRowContext(ctx, finishSQL,
			bigint("pTaskId", fp.TaskID),
			bigint("pToken", fp.Token),
			nvarchar("pOutcome", string(fp.Outcome)),
			nvarchar("pError", fp.Error),
			bigint("pRetryMs", retryMs),
			integer("pExpectTranCount", expect)).Scan(&held)
	}
	var err error
	if expect == 0 {
		err = d.retry(ctx, retrySafe, run)
	} else {
		err = run(ctx)
	}
	if err != nil {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, mapErr(err))
	}
	if !held {
		return fmt.Errorf("finish task %d: %w", fp.TaskID, dialect.ErrLeaseLost)
	}
	return nil
}

// atomicBodySQL runs an atomic task's SQL body inside the worker's transaction
// so that the body cannot end that transaction. In: the body. Out: nothing.
//
// One more BEGIN TRANSACTION nests the body a level deeper: a COMMIT inside the
// body only takes the count back to the worker's level and makes nothing durable.
// After the body the count must be exactly one above where it started; otherwise
// the body committed, rolled back or left a transaction open, and THROW 50020
// (under XACT_ABORT ON) rolls everything back, the body's work included. A body
// that ran ROLLBACK has already undone everything; sp_executesql then raises
// error 266 (mismatching BEGIN and COMMIT), with the same result. Only then does
// the nesting level come back down, and nothing is durable until the worker
// commits after TaskFinish.
const atomicBodySQL = `
DECLARE @Body nvarchar(max) = @pBody,
        @TranCount int = @@TRANCOUNT,
        @Msg nvarchar(2048);
BEGIN TRANSACTION;
EXEC sys.sp_executesql @Body;
IF @@TRANCOUNT <> @TranCount + 1
BEGIN
    SET @Msg = CONCAT(N'stageq: an atomic task body must not commit, roll back or leave open a transaction (@@TRANCOUNT went from ',
                      @TranCount + 1, N' to ', @@TRANCOUNT, N')');
    THROW 50020, @Msg, 1;
END;
COMMIT TRANSACTION;`

// TaskExecAtomic runs an atomic task's SQL body in tx, a transaction from BeginTx,
// so that the body can neither commit nor roll back the worker's transaction: a
// body that tries is rejected and nothing it did is kept. The body runs through
// sp_executesql, as the seed ran it through EXEC: its local variables and #temp
// tables live for the body only, and it cannot contain GO. It implements
// dialect.AtomicExecer, which the worker's runner uses for atomic SQL tasks.
func (d *SQLServer) TaskExecAtomic(ctx context.Context, tx *sql.Tx, body string) error {
	if _, err := tx.ExecContext(ctx, atomicBodySQL, nvarchar("pBody", body)); err != nil {
		return mapErr(err)
	}
	return nil
}
