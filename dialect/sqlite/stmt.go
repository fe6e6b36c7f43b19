package sqlite

import (
	"context"
	"database/sql"

	"github.com/stageq/stageq/dialect"
)

// Prepared statements. modernc.org/sqlite parses and plans a statement's SQL
// on every call unless it is prepared, and that was a fifth of a draining
// worker's CPU. Each queue statement (always one of this package's constants,
// so their number is fixed) is prepared once on s.db, on first use, and kept
// for the life of the dialect; inside a transaction it runs through
// Tx.StmtContext, which reuses the statement already prepared on the one
// connection.
//
// Deadlock rule: s.db has one connection and a transaction holds it, so
// nothing here calls s.db while a transaction of the same goroutine is open. A
// transaction that meets a statement not yet in the cache notes it, and runs
// it prepared on itself from its second use on (txQuerier); inTx prepares the
// noted statements on s.db after Commit or Rollback. (Run unprepared at every
// use instead, a first Submit of 200,000 tasks parsed its INSERT 200,000
// times: about 55 µs a task, most of a fresh process's enqueue.)

// maxStmts bounds the cache (there are far fewer queue statements than this).
const maxStmts = 512

// cachedStmt returns the statement prepared for query, or nil.
func (s *SQLite) cachedStmt(query string) *sql.Stmt {
	s.stmtMu.RLock()
	defer s.stmtMu.RUnlock()
	return s.stmts[query]
}

// prepareStmt prepares query on s.db and caches it. The caller must hold no
// transaction on s.db. A statement that fails to prepare (its tables may not
// exist before migrations) is not cached; nil is returned and the caller runs
// the SQL unprepared, which reports the error as before.
func (s *SQLite) prepareStmt(ctx context.Context, query string) *sql.Stmt {
	if st := s.cachedStmt(query); st != nil {
		return st
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if old := s.stmts[query]; old != nil {
		st.Close()
		return old
	}
	if len(s.stmts) >= maxStmts {
		st.Close()
		return nil
	}
	s.stmts[query] = st
	return st
}

// prepareMissed prepares the statements a transaction ran unprepared. The
// transaction must have ended.
func (s *SQLite) prepareMissed(ctx context.Context, queries []string) {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	for _, q := range queries {
		s.prepareStmt(ctx, q)
	}
}

// txQuerier is the dialect.Querier of a transaction inTx runs fn in: each
// statement runs as the transaction's copy of its cached prepared statement.
// One not cached yet runs unprepared the first time and, met again in the same
// call, is prepared on the transaction: a statement run once costs no more
// than before, one run for every task of a submission is parsed once.
type txQuerier struct {
	s  *SQLite
	tx *sql.Tx
	// cached: tx is one of s.db's, begun by inTx, so statements prepared on
	// s.db run in it. A caller's transaction may come from another handle.
	cached bool
	stmts  map[string]*sql.Stmt // this call's statements; nil: unprepared
	missed []string             // met unprepared: for inTx to cache (cached only)
	own    []*sql.Stmt          // prepared on tx by this call
}

func (q *txQuerier) stmt(ctx context.Context, query string) *sql.Stmt {
	st, met := q.stmts[query]
	if st != nil {
		return st
	}
	if q.stmts == nil {
		q.stmts = make(map[string]*sql.Stmt, 16)
	}
	switch p := q.s.cachedStmt(query); {
	case p != nil && q.cached:
		st = q.tx.StmtContext(ctx, p)
	case !met:
		if q.cached { // a caller's transaction never gets to cache it
			q.missed = append(q.missed, query)
		}
	default:
		// One that fails to prepare runs unprepared, which reports its
		// error as before.
		if st, _ = q.tx.PrepareContext(ctx, query); st != nil {
			q.own = append(q.own, st)
		}
	}
	q.stmts[query] = st
	return st
}

// close closes the statements this call prepared on its transaction: a
// caller's transaction may run many calls before it ends, and database/sql
// would keep each call's statements until then.
func (q *txQuerier) close() {
	for _, st := range q.own {
		st.Close()
	}
}

// ExecContext implements dialect.Querier.
func (q *txQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return q.tx.ExecContext(ctx, query, args...)
}

// QueryContext implements dialect.Querier.
func (q *txQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext implements dialect.Querier.
func (q *txQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.tx.QueryRowContext(ctx, query, args...)
}

// dbQuerier runs statements outside any transaction, each on s.db as its cached
// prepared statement. Use it only where the goroutine holds no transaction.
type dbQuerier struct{ s *SQLite }

// pool returns the querier for statements outside a transaction.
func (s *SQLite) pool() dialect.Querier { return dbQuerier{s} }

// ExecContext implements dialect.Querier.
func (q dbQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := q.s.prepareStmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return q.s.db.ExecContext(ctx, query, args...)
}

// QueryContext implements dialect.Querier.
func (q dbQuerier) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := q.s.prepareStmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return q.s.db.QueryContext(ctx, query, args...)
}

// QueryRowContext implements dialect.Querier.
func (q dbQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := q.s.prepareStmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return q.s.db.QueryRowContext(ctx, query, args...)
}
