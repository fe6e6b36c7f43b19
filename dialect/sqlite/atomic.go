package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stageq/stageq/dialect"
)

// shiftLeasesSQL gives back to every lease still valid when an atomic body
// took the write lock (?1) the time the body held it: nobody could extend a
// lease meanwhile (issue 10, item 11).
const shiftLeasesSQL = `
UPDATE stageq_tasks
   SET lease_expires_at = strftime('%Y-%m-%d %H:%M:%f',
                                   julianday(lease_expires_at) + (julianday('now') - julianday(?1)))
 WHERE state = 'running' AND lease_expires_at >= ?1`

// writeHolds measures how long this process's atomic bodies held the write
// lock (dialect.WriteLockHolder).
type writeHolds struct {
	mu      sync.Mutex
	holding int
	since   time.Time // when holding became non-zero
	total   time.Duration
}

func (h *writeHolds) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding == 0 {
		h.since = time.Now()
	}
	h.holding++
}

func (h *writeHolds) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding--
	if h.holding == 0 {
		h.total += time.Since(h.since)
	}
}

// WriteHolds implements dialect.WriteLockHolder.
func (s *SQLite) WriteHolds() (bool, time.Duration) {
	s.holds.mu.Lock()
	defer s.holds.mu.Unlock()
	return s.holds.holding > 0, s.holds.total
}

// TaskExecAtomic implements dialect.AtomicExecer. The transaction (BEGIN
// IMMEDIATE) holds the database's write lock from its start, so every other
// writer waits for the body: the leases that no heartbeat could extend
// meanwhile are shifted by the time it took, in this transaction. The body
// runs inside a savepoint: when it fails, its effects are undone and the
// transaction commits the shift alone (the caller's Rollback then does
// nothing), so a failed body does not leave other workers' leases expired. A
// body with a COMMIT or ROLLBACK of its own ends the transaction, savepoint
// and all: the savepoint is then gone, and the attempt is
// dialect.ErrBodyEndedTx.
func (s *SQLite) TaskExecAtomic(ctx context.Context, tx *sql.Tx, body string) error {
	var began string
	if err := tx.QueryRowContext(ctx, "SELECT "+nowSQL).Scan(&began); err != nil {
		return fmt.Errorf("atomic body: %w", err)
	}
	// Measured inside the database's own hold, so a worker never credits more
	// than the shift below gives.
	s.holds.begin()
	if _, err := tx.ExecContext(ctx, "SAVEPOINT stageq_body"); err != nil {
		s.holds.end()
		return fmt.Errorf("atomic body: %w", err)
	}
	_, berr := tx.ExecContext(ctx, body)
	s.holds.end()
	// Cleanup runs even when the body was interrupted by its context; if that
	// context ended the transaction itself, these fail and the whole
	// transaction is gone, shift included.
	cctx := context.WithoutCancel(ctx)
	if berr != nil {
		if _, err := tx.ExecContext(cctx, "ROLLBACK TO stageq_body"); err != nil {
			return errors.Join(berr, savepointGone(err))
		}
	}
	if _, err := tx.ExecContext(cctx, "RELEASE stageq_body"); err != nil {
		return errors.Join(berr, savepointGone(err))
	}
	if _, err := tx.ExecContext(cctx, shiftLeasesSQL, began); err != nil {
		return errors.Join(berr, fmt.Errorf("shift leases: %w", err))
	}
	if berr != nil {
		if err := tx.Commit(); err != nil {
			return errors.Join(berr, fmt.Errorf("commit the shift of leases: %w", err))
		}
	}
	return berr
}

// savepointGone says what a failed ROLLBACK TO or RELEASE of the body's
// savepoint means: the body ended the transaction itself when the savepoint
// no longer exists.
func savepointGone(err error) error {
	if strings.Contains(err.Error(), "no such savepoint") {
		return fmt.Errorf("%w (%v)", dialect.ErrBodyEndedTx, err)
	}
	return err
}
