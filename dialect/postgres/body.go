package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/stageq/stageq/dialect"
)

// bodyRunningSQL reads, on the body's own connection, whether the attempt still
// runs under its token: a rescue that freed it before its body started means
// the body must not start. Only when the worker cannot vouch for the lease
// (dialect.BodyStart.LeaseHeld): the read costs more than a `SELECT 1` body
// (a round trip, and an index probe into a table whose rows churn), so a body
// claimed moments ago starts without it. The task is read by id alone and
// tested after, as body_session does: with state = 'running' in the WHERE
// clause, the planner may walk tasks_running instead of probing the key.
const bodyRunningSQL = `SELECT coalesce((SELECT state = 'running' AND lease_token = $2 FROM stageq.tasks WHERE id = $1), false)`

// bodySessionSQL calls body_session (routines/postgres/60_rescue.sql), for
// atomic bodies: it names the session after the attempt (application_name =
// stageq.body_tag) and reads whether the attempt still runs. An atomic body's
// transaction goes on after the body, into the statement that records the
// attempt's end, whose text carries no mark: by the name, the rescue still
// finds the session there, and while it sits idle in that transaction. (The
// comment of migration 000012, written before, says version-12 workers no longer
// call it: they do, for atomic bodies.) The name stays on the connection, so the
// worker does not reuse one whose atomic transaction did not commit
// (queue/runner.go).
const bodySessionSQL = `SELECT stageq_routines.body_session($1, $2)`

// A body's text starts with dialect.BodyMark, by which the rescue finds a
// dead worker's body while it runs. Marking the text costs nothing; naming
// the session (application_name, versions 4 to 11) cost a statement per body,
// the most expensive part of a `SELECT 1` body's start.

// BodyConn implements dialect.BodySessioner.
func (p *Postgres) BodyConn(ctx context.Context, s dialect.BodyStart) (*sql.Conn, string, error) {
	conn, err := p.bodies.Conn(ctx)
	if err != nil {
		return nil, "", dialect.NoConn(ctx, "body connection", err)
	}
	a := s.Lease
	check := bodyRunningSQL
	switch {
	case s.Atomic:
		check = p.calls.SQL(bodySessionSQL)
	case s.LeaseHeld != nil && s.LeaseHeld():
		// Judged now that the connection is in hand: taking it may have meant
		// opening a new one.
		return conn, dialect.BodyMark(a) + s.Body, nil
	}
	var running bool
	if err := conn.QueryRowContext(ctx, check, a.ID, a.Token).Scan(&running); err != nil {
		if dialect.ConnLost(err) {
			dialect.DiscardConn(conn)
		}
		conn.Close()
		return nil, "", fmt.Errorf("check the body's attempt: %w", mapErr(err))
	}
	if !running {
		conn.Close()
		return nil, "", fmt.Errorf("check the body's attempt: %w", dialect.ErrLeaseLost)
	}
	return conn, dialect.BodyMark(a) + s.Body, nil
}

// TaskExecAtomic implements dialect.AtomicExecer. A body of several statements
// runs as one simple query, in which a COMMIT or ROLLBACK of its own ends the
// worker's transaction: what the body did before it would be committed
// without the completion, and again by every retry. The body runs after a
// savepoint, which is released after it, or rolled back to after its error:
// either fails outside a transaction block, or with the savepoint gone, and
// the attempt is then dialect.ErrBodyEndedTx. It costs the SAVEPOINT and the
// RELEASE, two short statements, per atomic task.
func (p *Postgres) TaskExecAtomic(ctx context.Context, tx *sql.Tx, body string) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT stageq_body"); err != nil {
		return fmt.Errorf("atomic body: %w", mapErr(err))
	}
	_, berr := tx.ExecContext(ctx, body)
	end := "RELEASE SAVEPOINT stageq_body"
	if berr != nil {
		end = "ROLLBACK TO SAVEPOINT stageq_body"
	}
	if _, err := tx.ExecContext(ctx, end); err != nil {
		if ctx.Err() != nil || errors.Is(err, sql.ErrTxDone) || dialect.ConnLost(err) {
			// The attempt's context ended (database/sql then rolls the
			// transaction back), or the connection went: not the body's doing.
			return errors.Join(berr, err)
		}
		return errors.Join(berr, fmt.Errorf("%w (%v)", dialect.ErrBodyEndedTx, err))
	}
	return berr
}

// endBodySQL ends the backend that runs an attempt's body (the rescue's
// body_backend finds it by the mark BodyConn put on its text) and reports
// whether one ran. In: task id, token.
const endBodySQL = `SELECT coalesce(pg_terminate_backend(stageq_routines.body_backend($1, $2)), false)`

// bodyRunningNowSQL reports whether an attempt's body still runs. Each call is
// a transaction of its own, with a new snapshot of pg_stat_activity.
const bodyRunningNowSQL = `SELECT stageq_routines.body_backend($1, $2) IS NOT NULL`

// EndBody implements dialect.BodyEnder: it terminates the body's backend and
// waits, until ctx ends, for it to be gone (pg_terminate_backend only
// signals it).
func (p *Postgres) EndBody(ctx context.Context, l dialect.TaskLease) (bool, error) {
	var signalled bool
	if err := p.db.QueryRowContext(ctx, p.calls.SQL(endBodySQL), l.ID, l.Token).Scan(&signalled); err != nil {
		return false, fmt.Errorf("end the body of task %d: %w", l.ID, mapErr(err))
	}
	for signalled {
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("end the body of task %d: %w", l.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if err := p.db.QueryRowContext(ctx, p.calls.SQL(bodyRunningNowSQL), l.ID, l.Token).Scan(&signalled); err != nil {
			return false, fmt.Errorf("end the body of task %d: %w", l.ID, mapErr(err))
		}
	}
	return true, nil
}

var _ dialect.BodyEnder = (*Postgres)(nil)
