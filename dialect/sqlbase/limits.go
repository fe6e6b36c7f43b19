package sqlbase

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/stageq/stageq/dialect"
)

// LimitStatements are a dialect's texts for the concurrency limits.
type LimitStatements struct {
	// Upsert creates or changes a named or kind limit. In: key, max.
	Upsert string
	// Delete removes one. In: key.
	Delete string
	// List reads limits with their slots in use, processes' max_parallel
	// as "process:NAME". In: key ("" for all). Out: key, max, updated_at, running.
	List string
	// Wake, where set, tells idle workers that tasks may now be admitted,
	// as a new task does; it runs in the transaction of a change to a
	// process's max_parallel, whose statements cannot say so themselves
	// (PostgreSQL's pg_notify, delivered at commit). Empty where a commit
	// wakes workers by itself (SQLite's data_version) or nothing can.
	Wake string
	// MaxKey is the longest key, in characters, the limits table keeps: a
	// kind limit is "kind:" and a kind of up to 200 characters, which a
	// table of 200-character keys cannot hold for the longest kinds. 0: no
	// bound beyond dialect.ValidateLimit's.
	MaxKey int
}

// Limits live in the limits table (named keys and "kind:KIND") and in a
// process's max_parallel ("process:NAME"). None of them is a counter: the slots
// in use are the running tasks that match, counted by the claim, so a change
// takes effect at the next claim.

// LimitSet implements dialect.Operator.
func (b *Base) LimitSet(ctx context.Context, key string, max int) error {
	if err := dialect.ValidateLimit(key, max); err != nil {
		return fmt.Errorf("set limit: %w", err)
	}
	if name, ok := strings.CutPrefix(key, dialect.LimitProcessPrefix); ok {
		return b.ProcessConfigure(ctx, nil, name, dialect.ProcessSettings{MaxParallel: &max})
	}
	if n := utf8.RuneCountInString(key); b.Limits.MaxKey > 0 && n > b.Limits.MaxKey {
		return fmt.Errorf("set limit: %w: limit key %.40q… is %d characters; this database keeps keys of at most %d "+
			"(a kind limit needs a kind of at most %d)", dialect.ErrInvalid, key, n, b.Limits.MaxKey,
			b.Limits.MaxKey-len(dialect.LimitKindPrefix))
	}
	err := b.onPool(ctx, true, func(ctx context.Context) error {
		_, err := b.Pool.ExecContext(ctx, b.Limits.Upsert, key, max)
		return err
	})
	if err != nil {
		return fmt.Errorf("set limit %q: %w", key, b.MapErr(err))
	}
	return nil
}

// LimitGet implements dialect.Operator.
func (b *Base) LimitGet(ctx context.Context, key string) (dialect.LimitInfo, error) {
	return dialect.LimitByKey(ctx, key, b.limitList)
}

// LimitList implements dialect.Operator.
func (b *Base) LimitList(ctx context.Context) ([]dialect.LimitInfo, error) {
	return b.limitList(ctx, "")
}

func (b *Base) limitList(ctx context.Context, key string) ([]dialect.LimitInfo, error) {
	return list(ctx, b, "limits", b.Limits.List, dialect.ScanLimitInfo, key)
}

// LimitDelete implements dialect.Operator.
func (b *Base) LimitDelete(ctx context.Context, key string) error {
	if name, ok := strings.CutPrefix(key, dialect.LimitProcessPrefix); ok {
		if _, err := b.LimitGet(ctx, key); err != nil {
			return fmt.Errorf("delete limit: %w", err)
		}
		none := 0
		return b.ProcessConfigure(ctx, nil, name, dialect.ProcessSettings{MaxParallel: &none})
	}
	n, err := b.deleteOnce(ctx, b.Limits.Delete, key)
	if err != nil {
		return fmt.Errorf("delete limit %q: %w", key, b.MapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("limit %q: %w", key, dialect.ErrNotFound)
	}
	return nil
}
