package sqlite

import (
	"database/sql/driver"
	"fmt"
	"time"

	msqlite "modernc.org/sqlite"
)

// maxSleep bounds sleep() so a typo cannot park a worker slot for days.
const maxSleep = time.Hour

// registerFunctions adds SQL functions that SQLite lacks and tasks need:
//
//	sleep(seconds) — waits, then returns the seconds slept. PostgreSQL has
//	pg_sleep and SQL Server WAITFOR DELAY; the demo's tasks use this.
func registerFunctions() {
	msqlite.MustRegisterScalarFunction("sleep", 1, func(_ *msqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		var secs float64
		switch v := args[0].(type) {
		case int64:
			secs = float64(v)
		case float64:
			secs = v
		default:
			return nil, fmt.Errorf("sleep(seconds): seconds must be a number, got %T", v)
		}
		if secs < 0 {
			return nil, fmt.Errorf("sleep(seconds): seconds must be >= 0, got %v", secs)
		}
		d := min(time.Duration(secs*float64(time.Second)), maxSleep)
		time.Sleep(d)
		return d.Seconds(), nil
	})
}
