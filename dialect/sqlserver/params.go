package sqlserver

import (
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/golang-sql/civil"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/stageq/stageq/dialect"
)

// Parameters. go-mssqldb declares a plain Go string as nvarchar(<its length>), so
// every distinct length would compile a plan of its own (the plan-cache bloat of
// DESIGN.md). Every argument this package sends goes through one of these helpers
// instead, each with one fixed declaration; the statement then copies it into a
// local of the column's exact type and size (DECLARE @x nvarchar(200) = @px), so
// comparisons with indexed columns need no conversion. statements_test.go checks
// that every argument is built here and every parameter is copied that way.

// nvarchar sends s declared as nvarchar(max), whatever its length.
func nvarchar(name, s string) sql.NamedArg { return sql.Named(name, mssql.NVarCharMax(s)) }

// bigint sends v declared as bigint.
func bigint(name string, v int64) sql.NamedArg { return sql.Named(name, v) }

// integer sends v declared as int.
func integer(name string, v int32) sql.NamedArg { return sql.Named(name, v) }

// bit sends v declared as bit.
func bit(name string, v bool) sql.NamedArg { return sql.Named(name, v) }

// datetime2 sends t, in UTC, declared as datetime2(7), the type of every time
// column (a time.Time would be declared datetimeoffset and convert the column).
func datetime2(name string, t time.Time) sql.NamedArg {
	return sql.Named(name, civil.DateTimeOf(t.UTC()))
}

// Limits of the int parameters and of the nvarchar columns the locals are sized to.
const (
	maxName = 200 // process, worker, schedule, lease, limit key, kind
	maxHost = 256
)

// limitKeyMax is the longest key stageq.Limits holds for key: a named limit is a
// name (200), a kind limit is "kind:" and a whole kind (205), the size of the
// column and of the claim's @KindKey.
func limitKeyMax(key string) int {
	if strings.HasPrefix(key, dialect.LimitKindPrefix) {
		return len(dialect.LimitKindPrefix) + maxName
	}
	return maxName
}

// checkLen refuses a string longer than an nvarchar(n) column holds, counted as
// SQL Server counts (UTF-16 code units): assigning it to the sized local would cut
// it silently.
func checkLen(field, s string, n int) error {
	if l := len(utf16.Encode([]rune(s))); l > n {
		return fmt.Errorf("%w: %s is longer than %d characters (%d)", dialect.ErrInvalid, field, n, l)
	}
	return nil
}

// clampInt32 converts v to int32 for an int parameter, saturating.
func clampInt32(v int64) int32 {
	switch {
	case v > 1<<31-1:
		return 1<<31 - 1
	case v < -1<<31:
		return -1 << 31
	}
	return int32(v)
}

// rowLimit is a list's row limit as a TOP (@Limit) int parameter takes it: n,
// or every row when n is 0 or less.
func rowLimit(n int) int32 {
	if n <= 0 {
		return 1<<31 - 1
	}
	return clampInt32(int64(n))
}

// millis is d in whole milliseconds, at least 1 when d is positive.
func millis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && ms == 0 {
		ms = 1
	}
	return ms
}
