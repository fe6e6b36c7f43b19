package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
)

// bodySessionSQL calls stageq.body_session (migrations/postgres/000011): it
// names the session after the attempt (stageq.body_tag, by which the rescue
// finds a dead worker's body) and bounds it with
// client_connection_check_interval. It writes nothing, so a body's start costs
// no transaction. Out: false when the attempt is no longer running.
const bodySessionSQL = `SELECT stageq.body_session($1, $2)`

// BodyConn implements dialect.BodySessioner.
func (p *Postgres) BodyConn(ctx context.Context, a dialect.TaskLease) (*sql.Conn, error) {
	conn, err := p.bodies.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("body connection: %w", err)
	}
	var running bool
	if err := conn.QueryRowContext(ctx, bodySessionSQL, a.ID, a.Token).Scan(&running); err != nil {
		if dialect.ConnLost(err) {
			dialect.DiscardConn(conn)
		}
		conn.Close()
		return nil, fmt.Errorf("name the body's session: %w", mapErr(err))
	}
	if !running {
		conn.Close()
		return nil, fmt.Errorf("name the body's session: %w", dialect.ErrLeaseLost)
	}
	return conn, nil
}
