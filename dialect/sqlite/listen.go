package sqlite

import (
	"context"
	"time"
)

// watchInterval is how often an idle worker looks at PRAGMA data_version. The
// pragma reads a counter in shared memory (no disk I/O, no lock), so checking
// often costs next to nothing, unlike polling the queue itself.
const watchInterval = 5 * time.Millisecond

// Listen implements dialect.Notifier. SQLite has no notifications, but
// PRAGMA data_version on a connection changes whenever any other connection, in
// this process or another, commits. A change wakes the worker, which then runs
// one claim; an unchanged counter costs no query of the queue.
func (s *SQLite) Listen(ctx context.Context) (<-chan struct{}, error) {
	conn, err := s.bodies.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var last int64
	if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&last); err != nil {
		conn.Close()
		return nil, err
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		defer conn.Close()
		ticker := time.NewTicker(watchInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			var v int64
			if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
				continue
			}
			if v != last {
				last = v
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}
