package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// channel is the NOTIFY channel stageq's routines signal when tasks become
// available (a submission, a stage opening, a rescue).
const channel = "stageq_tasks"

// Listen implements dialect.Notifier with a dedicated connection that LISTENs.
// When the connection drops it reconnects with backoff; workers keep polling
// meanwhile, so a lost notification costs latency, never a task.
func (p *Postgres) Listen(ctx context.Context) (<-chan struct{}, error) {
	cfg, err := pgconnConfig(p.dsn)
	if err != nil {
		return nil, err
	}
	conn, err := listen(ctx, cfg)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		backoff := 100 * time.Millisecond
		for {
			if conn == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 5*time.Second)
				if conn, err = listen(ctx, cfg); err != nil {
					conn = nil
					continue
				}
				backoff = 100 * time.Millisecond
				signal(out) // work may have arrived while we were away
			}
			if _, err := conn.WaitForNotification(ctx); err != nil {
				conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				continue
			}
			signal(out)
		}
	}()
	return out, nil
}

func listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, err
	}
	// One round trip: the listener's session is set up like the pools' (an
	// idle-session timeout would end it between notifications).
	if _, err := conn.Exec(ctx, "LISTEN "+channel+";\n"+sessionSetupSQL); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// signal delivers without blocking; one pending wake-up is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
