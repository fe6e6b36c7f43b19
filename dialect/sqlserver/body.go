package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// bodySessionSQL calls BodySession (routines/sqlserver/65_BodySession.sql; the design: migrations/sqlserver/000010): in the
// body's own session it checks that the attempt still runs under its token,
// records @@SPID in the attempt's Logs row and tags the session with the attempt
// (SET CONTEXT_INFO), so that Rescue can KILL a body whose worker died.
// In: task id, lease token. Out: whether the attempt still runs (0: rescued or
// finished meanwhile; the body must not start).
//
// No SET NOCOUNT ON here, unlike the other batches: a SET in a batch stays in
// effect for the session, and the body runs next on this very session; the
// procedure sets NOCOUNT for itself, which ends when it returns.
const bodySessionSQL = `
DECLARE @TaskId bigint = @pTaskId,
        @Token bigint = @pToken,
        @Running bit = 0;
EXEC stageq_routines.BodySession @TaskId = @TaskId, @Token = @Token, @Running = @Running OUTPUT;
SELECT @Running;`

// BodyConn implements dialect.BodySessioner: it takes a connection of the pool
// for an attempt's body and records that connection's session (migration 10);
// the body's text is run as it is. The statement is needed whether or not the
// worker vouches for the lease (s.LeaseHeld): the rescue finds the body by the
// session it records. dialect.ErrLeaseLost: the attempt no longer runs under
// its token.
func (d *SQLServer) BodyConn(ctx context.Context, s dialect.BodyStart) (*sql.Conn, string, error) {
	a := s.Lease
	conn, err := d.bodies.Conn(ctx)
	if err != nil {
		return nil, "", dialect.NoConn(ctx, "body connection", err)
	}
	var running bool
	if err := conn.QueryRowContext(ctx, d.calls.SQL(bodySessionSQL),
		bigint("pTaskId", a.ID),
		bigint("pToken", a.Token)).Scan(&running); err != nil {
		if dialect.ConnLost(err) {
			dialect.DiscardConn(conn)
		}
		conn.Close()
		return nil, "", fmt.Errorf("record the body's session of task %d: %w", a.ID, mapErr(err))
	}
	if !running {
		conn.Close()
		return nil, "", fmt.Errorf("record the body's session of task %d: %w", a.ID, dialect.ErrLeaseLost)
	}
	return conn, s.Body, nil
}

var _ dialect.BodySessioner = (*SQLServer)(nil)
