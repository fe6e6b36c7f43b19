package dialect

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
)

// Opener opens a dialect for a DSN whose scheme it registered.
type Opener func(ctx context.Context, dsn string) (Dialect, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes a dialect available for a DSN scheme ("postgres", "sqlite", …).
// It panics on a duplicate scheme, like database/sql.Register.
func Register(scheme string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("dialect: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes lists the registered DSN schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, 0, len(openers))
	for s := range openers {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open picks the dialect from the DSN's scheme and opens it.
func Open(ctx context.Context, dsn string) (Dialect, error) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("%w: %q has no scheme; use one of %s (for example sqlite://stageq.db)",
			ErrUnknownScheme, Redact(dsn), strings.Join(Schemes(), ", "))
	}
	mu.RLock()
	open := openers[strings.ToLower(scheme)]
	mu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w %q; use one of %s", ErrUnknownScheme, scheme, strings.Join(Schemes(), ", "))
	}
	return open(ctx, dsn)
}

// Redact hides the password of a DSN so it can be logged or shown in an error.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		if i := strings.Index(strings.ToLower(dsn), "password="); i >= 0 {
			end := strings.IndexAny(dsn[i:], ";& ")
			if end < 0 {
				return dsn[:i] + "password=xxxxx"
			}
			return dsn[:i] + "password=xxxxx" + dsn[i+end:]
		}
		return dsn
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	changed := false
	for k := range q {
		if strings.EqualFold(k, "password") || strings.EqualFold(k, "pwd") {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}
