package sqlite

import (
	"fmt"
	"time"
)

// Times are stored as UTC text from SQLite's own clock; this is their layout.
const timeLayout = "2006-01-02 15:04:05.000"

// nowSQL is the database's now in the stored layout.
const nowSQL = `strftime('%Y-%m-%d %H:%M:%f', 'now')`

// offset renders a duration as an SQLite date modifier ('+1.500 seconds'), passed
// as a parameter to strftime(…, 'now', ?).
func offset(d time.Duration) string {
	return fmt.Sprintf("%+.3f seconds", d.Seconds())
}

// formatTime renders a time in the stored layout.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// parseTime reads a stored time.
func parseTime(s string) (time.Time, error) {
	t, err := time.ParseInLocation(timeLayout, s, time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse time %q: %w", s, err)
	}
	return t, nil
}
