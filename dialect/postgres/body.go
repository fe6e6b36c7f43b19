package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// bodySessionSQL calls stageq.body_session (migrations/postgres/000004): it
// names the session after the attempt, bounds it with
// client_connection_check_interval and records pg_backend_pid() in the
// attempt's Logs row. Out: false when the attempt is no longer running.
const bodySessionSQL = `SELECT stageq.body_session($1, $2)`

// BodyConn implements dialect.BodySessioner.
func (p *Postgres) BodyConn(ctx context.Context, a dialect.TaskLease) (*sql.Conn, error) {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("body connection: %w", err)
	}
	var running bool
	if err := conn.QueryRowContext(ctx, bodySessionSQL, a.ID, a.Token).Scan(&running); err != nil {
		if dialect.ConnLost(err) {
			dialect.DiscardConn(conn)
		}
		conn.Close()
		return nil, fmt.Errorf("record the body's session: %w", mapErr(err))
	}
	if !running {
		conn.Close()
		return nil, fmt.Errorf("record the body's session: %w", dialect.ErrLeaseLost)
	}
	return conn, nil
}
