package sqlserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// finishSQL calls Finish (routines/sqlserver/50_Finish.sql),
// which runs FinishMany for one attempt: it checks the fence (lease
// token) and ends the attempt in Tasks and Logs, locking the process row only
// for a hand-back or a final failure. The outcome is succeeded, failed, released
// or abandoned (dialect.OutcomeAbandoned, migration 9: counted against the
// task's abandon budget, not its attempts). It does not open the next stage: the caller
// passes the task's process to StagesAdvance once its transaction committed. In:
// task id, token, outcome, error text (empty for none), retry delay in ms (0:
// failed for good), and the @@TRANCOUNT expected (0 on the pool, 1 in the
// caller's transaction from BeginTx). Out: whether the token
// still held the task.
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
EXEC stageq_routines.Finish @TaskId = @TaskId, @Token = @Token, @Outcome = @Outcome, @Error = @Error,
     @RetryMs = @RetryMs, @Held = @Held OUTPUT;
SELECT @Held;`

// TaskFinish implements dialect.Dialect. On the pool it is retried only after
// errors that guarantee nothing was committed (a retry after a commit whose answer
// was lost would report ErrLeaseLost for a finish that happened).
func (d *SQLServer) TaskFinish(ctx context.Context, tx *sql.Tx, fp dialect.FinishParams) error {
	var retryMs int64
	if fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0 {
		retryMs = millis(fp.RetryAfter)
	}
	q, expect := dialect.On(d.db, tx), int32(0)
	if tx != nil {
		expect = 1
	}
	var held bool
	run := func(ctx context.Context) error {
		return q.QueryRowContext(ctx, d.calls.SQL(finishSQL),
			bigint("pTaskId", fp.TaskID),
			bigint("pToken", fp.Token),
			nvarchar("pOutcome", string(fp.Outcome)),
			nvarchar("pError", fp.Error),
			bigint("pRetryMs", retryMs),
			integer("pExpectTranCount", expect)).Scan(&held)
	}
	if err := d.retryOn(ctx, tx, retrySafe, run); err != nil {
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
//
// The batch sets XACT_ABORT ON for itself (a SET in a parameterised batch ends
// with it): since migration 10 an SQL body's transaction is begun on the body's
// own connection (dialect.BodySessioner; queue/runner.go calls conn.BeginTx),
// not by BeginTx, so the session-level SET of beginTxSQL may be missing.
const atomicBodySQL = `
SET XACT_ABORT ON;
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

// finishManySQL calls FinishMany (routines/sqlserver): the attempts of @Results (a JSON array
// of {id, token, outcome, error, retry_ms}) end in one transaction, each fenced
// by its token, succeeded ones without locking any process row. An outcome is
// succeeded, failed, released or abandoned (the body's database connection was
// lost): since migration 9 an abandoned attempt goes back like a released one and
// counts against the task's abandon budget (10), not its max_attempts, and its
// Logs row gets the error with the count. In: the JSON
// array (at most maxFinishChunk results). Out: a row (task id, NULL) per attempt
// recorded and a row (NULL, process id) per process whose stage the batch may
// have ended.
const finishManySQL = `
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Results nvarchar(max) = @pResults;
EXEC stageq_routines.FinishMany @Results = @Results;`

// maxFinishChunk bounds the results of one FinishMany call: each succeeded task
// costs about four row locks (its clustered row and three index keys) in the
// DELETE and one in the Logs UPDATE, so 500 stay far below the 5,000 locks on one
// object at which SQL Server attempts lock escalation.
const maxFinishChunk = 500

// finishResult is one element of finishManySQL's JSON array.
type finishResult struct {
	ID      int64  `json:"id"`
	Token   int64  `json:"token"`
	Outcome string `json:"outcome"` // a dialect.Outcome: succeeded, failed, released or abandoned
	Error   string `json:"error,omitempty"`
	RetryMs int64  `json:"retry_ms"`
}

// finishedRow is one row of finishManySQL's answer: a task whose attempt was
// recorded, or a process whose stage may have ended.
type finishedRow struct{ task, process sql.NullInt64 }

// scanFinishedRow reads a finishedRow.
func scanFinishedRow(r *sql.Rows, f *finishedRow) error { return r.Scan(&f.task, &f.process) }

// TaskFinishMany implements dialect.BatchFinisher, in chunks of maxFinishChunk
// results, each its own transaction (a chunk that committed stays recorded when a
// later one fails). A chunk is retried only after errors that guarantee nothing
// was committed: a repeat after a lost commit would report its attempts as lost.
// FinishMany answers by task id, so a batch that names a task twice goes in
// rounds (dialect.FinishInRounds), each chunked so.
func (d *SQLServer) TaskFinishMany(ctx context.Context, ps []dialect.FinishParams) (dialect.FinishResult, error) {
	return dialect.FinishInRounds(ps, func(part []dialect.FinishParams) (dialect.FinishResult, error) {
		return d.finishChunks(ctx, part)
	})
}

// finishChunks ends ps, which names each task once, chunk by chunk.
func (d *SQLServer) finishChunks(ctx context.Context, ps []dialect.FinishParams) (dialect.FinishResult, error) {
	res := dialect.FinishResult{Held: make([]bool, len(ps))}
	held := map[int64]bool{}
	seen := map[int64]bool{}
	// heldUpTo fills Held for ps[:n], the entries of the chunks that committed.
	heldUpTo := func(n int) {
		for i, fp := range ps[:n] {
			res.Held[i] = held[fp.TaskID]
		}
	}
	// partial reports a failure of the chunk at ps[start:]: the chunks before
	// it committed and stay recorded.
	partial := func(start int, err error) (dialect.FinishResult, error) {
		heldUpTo(start)
		res.Committed = make([]bool, len(ps))
		for i := range start {
			res.Committed[i] = true
		}
		return res, fmt.Errorf("finish %d tasks: %w", len(ps), err)
	}
	for start := 0; start < len(ps); start += maxFinishChunk {
		chunk := ps[start:min(start+maxFinishChunk, len(ps))]
		list := make([]finishResult, len(chunk))
		for i, fp := range chunk {
			list[i] = finishResult{ID: fp.TaskID, Token: fp.Token, Outcome: string(fp.Outcome), Error: fp.Error}
			if fp.Outcome == dialect.OutcomeFailed && fp.RetryAfter > 0 {
				list[i].RetryMs = millis(fp.RetryAfter)
			}
		}
		body, err := json.Marshal(list)
		if err != nil {
			return partial(start, err)
		}
		got, err := queryAll(ctx, d, retrySafe, d.calls.SQL(finishManySQL), scanFinishedRow, nvarchar("pResults", string(body)))
		if err != nil {
			return partial(start, err)
		}
		for _, r := range got {
			if r.task.Valid {
				held[r.task.Int64] = true
			}
			if r.process.Valid && !seen[r.process.Int64] {
				seen[r.process.Int64] = true
				res.Advance = append(res.Advance, r.process.Int64)
			}
		}
	}
	heldUpTo(len(ps))
	return res, nil
}

// advanceSQL calls Advance (routines/sqlserver): in, a JSON array of process ids whose stage
// may have ended (at most maxAdvanceChunk); out, those whose row another
// transaction holds (not advanced yet). Each process is advanced in a short
// transaction of its own, its row locked with UPDLOCK, READPAST.
const advanceSQL = `
SET NOCOUNT ON;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
DECLARE @Ids nvarchar(max) = @pIds;
EXEC stageq_routines.Advance @Ids = @Ids;`

// maxAdvanceChunk bounds the ids of one Advance call, so one call stays short.
const maxAdvanceChunk = 500

// scanID reads a row of one id.
func scanID(r *sql.Rows, id *int64) error { return r.Scan(id) }

// StagesAdvance implements dialect.StageAdvancer. Idempotent, so retried after
// any transient error.
func (d *SQLServer) StagesAdvance(ctx context.Context, processIDs []int64) ([]int64, error) {
	var busy []int64
	for start := 0; start < len(processIDs); start += maxAdvanceChunk {
		chunk := processIDs[start:min(start+maxAdvanceChunk, len(processIDs))]
		body, err := json.Marshal(chunk)
		if err != nil {
			return processIDs, fmt.Errorf("advance stages of %d processes: %w", len(processIDs), err)
		}
		got, err := queryAll(ctx, d, retryAll, d.calls.SQL(advanceSQL), scanID, nvarchar("pIds", string(body)))
		if err != nil {
			// What was not tried yet, and this chunk, are all still to do.
			return append(busy, processIDs[start:]...), fmt.Errorf("advance stages of %d processes: %w", len(processIDs), err)
		}
		busy = append(busy, got...)
	}
	return busy, nil
}
