package dialect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultConnectTimeout bounds a connection attempt (dial, TLS, login) when the
// DSN sets no bound of its own: a server that accepts TCP and never answers must
// not hang a command.
const DefaultConnectTimeout = 10 * time.Second

// ErrBadDSN means the DSN itself is malformed (it does not parse, or a
// parameter is invalid); connecting was not tried.
var ErrBadDSN = errors.New("invalid DSN")

// connectTimeoutParams names, per scheme, the DSN parameter (in seconds) that
// bounds a connection attempt. SQLite opens a file and has none.
var connectTimeoutParams = map[string]string{
	"postgres":   "connect_timeout",
	"postgresql": "connect_timeout",
	"sqlserver":  "connection timeout",
}

// WithConnectTimeout returns the DSN with its connect-timeout parameter set to
// d (whole seconds, rounded up), replacing one the DSN had. A DSN whose scheme
// has no such parameter, or that does not parse, is returned unchanged (opening
// it reports the problem).
func WithConnectTimeout(dsn string, d time.Duration) string {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || d <= 0 {
		return dsn
	}
	param, ok := connectTimeoutParams[strings.ToLower(scheme)]
	if !ok {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	for k := range q {
		if strings.EqualFold(k, param) {
			q.Del(k)
		}
	}
	q.Set(param, strconv.Itoa(int(math.Ceil(d.Seconds()))))
	u.RawQuery = q.Encode()
	return u.String()
}

// ConnectFailed words a failed first connection: which database (password
// hidden), and, when the attempt ran out of time, how long it was allowed and
// how to change that bound. A refusal (nothing listening, no such database,
// a wrong password) gets no such hint: more time would not help. The drivers'
// errors reach it as text (scrubbed of the password), so a timeout is told by
// its words.
func ConnectFailed(dialect, dsn string, timeout time.Duration, err error) error {
	text := strings.ToLower(err.Error())
	if !strings.Contains(text, "timeout") && !strings.Contains(text, "timed out") && !strings.Contains(text, "deadline exceeded") {
		return fmt.Errorf("connect to %s %s: %w", dialect, Redact(dsn), err)
	}
	return fmt.Errorf("connect to %s %s: %w (each attempt is bounded by %s: set %q in the DSN or --connect-timeout)",
		dialect, Redact(dsn), err, timeout, connectTimeoutParams[dialect])
}

// Scrubbed is err with its text replaced by text: err's own, with what must not
// be shown taken out (a DSN's password, which drivers repeat in their errors).
// Nothing of err can be reached through it but the context's errors
// (context.Canceled, context.DeadlineExceeded), so that errors.Is still tells
// an attempt its caller cancelled, or one that ran out of time, from a refusal.
func Scrubbed(err error, text string) error {
	se := scrubbedError{text: text}
	switch {
	case errors.Is(err, context.Canceled):
		se.ctxErr = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		se.ctxErr = context.DeadlineExceeded
	}
	return se
}

// scrubbedError is Scrubbed's error.
type scrubbedError struct {
	text   string
	ctxErr error // nil, context.Canceled or context.DeadlineExceeded
}

func (e scrubbedError) Error() string { return e.text }
func (e scrubbedError) Unwrap() error { return e.ctxErr }
