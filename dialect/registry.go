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
		return nil, fmt.Errorf("%w: %q has no scheme; %s (for example sqlite://stageq.db)",
			ErrUnknownScheme, Redact(dsn), useSchemes())
	}
	mu.RLock()
	open := openers[strings.ToLower(scheme)]
	mu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w %q; %s", ErrUnknownScheme, scheme, useSchemes())
	}
	return open(ctx, dsn)
}

// useSchemes says which schemes a DSN may use, or that this build links no
// dialect at all (every stageq_no_<dialect> build tag given).
func useSchemes() string {
	if s := Schemes(); len(s) > 0 {
		return "use one of " + strings.Join(s, ", ")
	}
	return "this build links no dialect (built with every stageq_no_<dialect> tag)"
}

// Redact hides the password of a DSN so it can be logged or shown in an error,
// also when the DSN does not parse as a URL (a stray %, a space): then everything
// between the user name and the last '@' is hidden, and so is any password=
// parameter.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return redactRaw(dsn)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if u.Scheme == "" || u.Opaque != "" || (u.Host == "" && u.User == nil && u.RawQuery == "") {
		return redactRaw(dsn) // key=value;… strings parse as a path: treat them as text
	}
	q := u.Query()
	changed := false
	for k := range q {
		if isPasswordKey(k) {
			q.Set(k, "xxxxx")
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func isPasswordKey(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	return k == "password" || k == "pwd" || k == "pass"
}

// redactRaw hides passwords in a DSN that is not a well-formed URL.
func redactRaw(dsn string) string {
	out := dsn
	if scheme, rest, ok := strings.Cut(dsn, "://"); ok {
		// The authority ends at the first '/', '?' or '#' after the last '@' (a
		// password may itself hold '/' or '@').
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, hasPW := strings.Cut(rest[:at], ":"); hasPW {
				out = scheme + "://" + user + ":xxxxx" + rest[at:]
			}
		}
	}
	// key=value pairs separated by ';', '&', '?' or spaces (ADO, libpq, URL query).
	var b strings.Builder
	for i := 0; i < len(out); {
		j := strings.IndexAny(out[i:], ";&? ")
		part := out[i:]
		if j >= 0 {
			part = out[i : i+j]
		}
		if k, _, ok := strings.Cut(part, "="); ok && isPasswordKey(k) {
			b.WriteString(k + "=xxxxx")
		} else {
			b.WriteString(part)
		}
		if j < 0 {
			break
		}
		b.WriteByte(out[i+j])
		i += j + 1
	}
	return b.String()
}
