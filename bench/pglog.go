package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/stageq/stageq/dialect"
)

// pgLog reads the statements one database sent, from PostgreSQL's server log,
// after `ALTER DATABASE … SET log_statement = 'all'` on that database alone. It is
// the fallback when pg_stat_statements is not loaded: the server logs every
// top-level statement of the database's sessions, whatever client sent it, and
// nothing of other databases changes.
type pgLog struct {
	path string
}

// findPGLog locates the server log: the given path, the logging collector's
// current file, or else the file the postmaster's stderr points at (a local
// server; Debian's pg_ctlcluster sends stderr to /var/log/postgresql).
func findPGLog(ctx context.Context, admin *sql.DB, given string) (*pgLog, error) {
	var prefix string
	if err := admin.QueryRowContext(ctx, "SELECT current_setting('log_line_prefix')").Scan(&prefix); err != nil {
		return nil, fmt.Errorf("log_line_prefix: %w", err)
	}
	if !strings.Contains(prefix, "%d") || !strings.Contains(prefix, "[%p]") {
		return nil, fmt.Errorf("log_line_prefix %q names no database (%%d) or pid ([%%p])", prefix)
	}
	path := given
	if path == "" {
		var cur sql.NullString
		if err := admin.QueryRowContext(ctx, "SELECT pg_current_logfile()").Scan(&cur); err == nil && cur.Valid {
			var dataDir string
			if err := admin.QueryRowContext(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir); err == nil {
				path = cur.String
				if !filepath.IsAbs(path) {
					path = filepath.Join(dataDir, path)
				}
			}
		}
	}
	if path == "" {
		var pidFile string
		if err := admin.QueryRowContext(ctx, "SELECT pg_read_file('postmaster.pid')").Scan(&pidFile); err != nil {
			return nil, fmt.Errorf("no log collector and postmaster.pid unreadable: %w", err)
		}
		pid, _, _ := strings.Cut(pidFile, "\n")
		target, err := os.Readlink("/proc/" + strings.TrimSpace(pid) + "/fd/2")
		if err != nil {
			return nil, fmt.Errorf("server log: postmaster stderr: %w (is the server local?)", err)
		}
		path = target
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	f.Close()
	return &pgLog{path: path}, nil
}

// offset is the log's current size: statements logged after it are new.
func (l *pgLog) offset() (int64, error) {
	st, err := os.Stat(l.path)
	if err != nil {
		return 0, fmt.Errorf("server log: %w", err)
	}
	return st.Size(), nil
}

// statements returns the statements database db logged after offset, in order,
// each with its whitespace folded.
func (l *pgLog) statements(db string, offset int64) ([]string, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	return parseStatements(f, db)
}

// logLine matches the start of a log entry under Debian's default prefix
// '%m [%p] %q%u@%d ': time, pid, user@database, level, message.
var logLine = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \S+ \[(\d+)\] (?:(\S*)@(\S*) )?([A-Z]+):  (.*)$`)

// statementMsg matches log_statement's messages: simple protocol, and the
// execute step of the extended protocol (named or unnamed statement).
var statementMsg = regexp.MustCompile(`^(?:statement: |execute (?:<unnamed>|[^:]+): )(.*)$`)

// bodyMark matches the comment a worker starts each SQL body's text with, its
// attempt's tag (dialect.BodyMark; the log shows its newline as a space): the body is the user's statement,
// one kind however many attempts run it, so the count of distinct statements
// reads it without the tag.
var bodyMark = regexp.MustCompile(dialect.BodyMarkPattern + ` `)

// parseStatements reads log entries and returns the statements of database db,
// SQL bodies without their attempt's tag (bodyMark). A statement may span
// lines; continuation lines start with a tab.
func parseStatements(r io.Reader, db string) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []string
	var cur *strings.Builder
	// Continuation lines belong to the entry above them in the file; entries of
	// concurrent backends are written whole, so only the last entry grows.
	flush := func() {
		if cur != nil {
			st := strings.Join(strings.Fields(cur.String()), " ")
			out = append(out, bodyMark.ReplaceAllString(st, "/* stageq task <id> lease <token> */ "))
			cur = nil
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") {
			if cur != nil {
				cur.WriteString(" ")
				cur.WriteString(line[1:])
			}
			continue
		}
		flush()
		m := logLine.FindStringSubmatch(line)
		if m == nil || m[3] != db || m[4] != "LOG" {
			continue
		}
		sm := statementMsg.FindStringSubmatch(m[5])
		if sm == nil {
			continue
		}
		cur = &strings.Builder{}
		cur.WriteString(sm[1])
	}
	flush()
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	return out, nil
}

// distinct counts distinct strings.
func distinct(xs []string) map[string]int {
	m := map[string]int{}
	for _, x := range xs {
		m[x]++
	}
	return m
}
