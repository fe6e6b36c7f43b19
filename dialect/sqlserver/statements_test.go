package sqlserver

// These tests need no SQL Server. They read the statements this package sends
// (statements.go), the package's Go source and the migration files, and check the
// rules of docs/sqlserver.md mechanically:
//
//   - every parameter is copied once into a local of an explicit type and size;
//   - reads that decide what a worker takes lock as they read and skip held rows
//     (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK), every READPAST comes with
//     READCOMMITTEDLOCK, and the procedures read queue tables with locking reads;
//   - the Go code sends only constants listed in statements.go, with arguments
//     built by the typed helpers of params.go, and builds no SQL at run time;
//   - the migrations contain no GO separator and create procedures only in
//     dynamic batches of their own.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// ---------------------------------------------------------------------------
// A small T-SQL lexer: enough to tell code from comments and string literals.

type partKind int

const (
	partCode partKind = iota
	partString
	partComment
)

type part struct {
	kind partKind
	text string // for strings: the content, with '' turned back into '
}

// lexTSQL splits T-SQL text into code, string literals ('...', N'...') and
// comments (-- to end of line, /* */ nested as T-SQL nests them). Bracketed and
// double-quoted identifiers stay code. It fails on an unterminated literal or
// comment, which in a migration means a quote was not doubled inside EXEC (N'...').
func lexTSQL(s string) ([]part, error) {
	var parts []part
	var code strings.Builder
	flush := func() {
		if code.Len() > 0 {
			parts = append(parts, part{partCode, code.String()})
			code.Reset()
		}
	}
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "--"):
			flush()
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				end = len(s) - i
			}
			parts = append(parts, part{partComment, s[i : i+end]})
			i += end
		case strings.HasPrefix(s[i:], "/*"):
			flush()
			depth, j := 0, i
			for j < len(s) {
				if strings.HasPrefix(s[j:], "/*") {
					depth++
					j += 2
				} else if strings.HasPrefix(s[j:], "*/") {
					depth--
					j += 2
					if depth == 0 {
						break
					}
				} else {
					j++
				}
			}
			if depth != 0 {
				return nil, fmt.Errorf("unterminated /* comment at byte %d", i)
			}
			parts = append(parts, part{partComment, s[i:j]})
			i = j
		case s[i] == '\'':
			flush()
			var lit strings.Builder
			j := i + 1
			closed := false
			for j < len(s) {
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						lit.WriteByte('\'')
						j += 2
						continue
					}
					closed = true
					j++
					break
				}
				lit.WriteByte(s[j])
				j++
			}
			if !closed {
				return nil, fmt.Errorf("unterminated string literal at byte %d", i)
			}
			parts = append(parts, part{partString, lit.String()})
			i = j
		case s[i] == '[' || s[i] == '"':
			closeCh := byte(']')
			if s[i] == '"' {
				closeCh = '"'
			}
			j := i + 1
			for j < len(s) {
				if s[j] == closeCh {
					if j+1 < len(s) && s[j+1] == closeCh {
						j += 2
						continue
					}
					break
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated identifier at byte %d", i)
			}
			code.WriteString(s[i : j+1])
			i = j + 1
		default:
			code.WriteByte(s[i])
			i++
		}
	}
	flush()
	return parts, nil
}

// codeOnly is the text with comments removed and every string literal replaced
// by a pair of quotes (so keywords inside messages do not count).
func codeOnly(t *testing.T, name, s string) string {
	t.Helper()
	return withoutComments(t, name, s, blankLiteral)
}

// blankLiteral writes a string literal as an empty one.
func blankLiteral(string) string { return "''" }

// withoutComments lexes s and puts it back together (joinParts); name says
// where s is from when it does not lex.
func withoutComments(t *testing.T, name, s string, literal func(content string) string) string {
	t.Helper()
	parts, err := lexTSQL(s)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return joinParts(parts, literal)
}

// joinParts puts lexed T-SQL back together with each comment a space (T-SQL
// reads it as one) and each string literal written by literal.
func joinParts(parts []part, literal func(content string) string) string {
	var b strings.Builder
	for _, p := range parts {
		switch p.kind {
		case partCode:
			b.WriteString(p.text)
		case partString:
			b.WriteString(literal(p.text))
		case partComment:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// ---------------------------------------------------------------------------
// Parameters.

// paramRe (base.go) finds the @p parameters.
var (
	// A copy into a typed local: @Local <type> = @pName. String and time types
	// must carry an explicit size or precision.
	declRe     = regexp.MustCompile(`(?i)@\w+\s+(n?varchar\(\s*(?:\d+|max)\s*\)|n?char\(\s*\d+\s*\)|bigint|int|bit|datetime2\(\s*\d\s*\))\s*=\s*(@p[A-Z]\w*)\b`)
	positional = regexp.MustCompile(`@p\d+\b|\?`)
)

// paramsOf lists the @p parameters a statement uses.
func paramsOf(t *testing.T, st statement) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range paramRe.FindAllString(codeOnly(t, st.name, st.sql), -1) {
		seen[p] = true
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func TestStatementParametersAreTypedAndSized(t *testing.T) {
	if len(statements) == 0 {
		t.Fatal("no statements registered")
	}
	names := map[string]bool{}
	for _, st := range statements {
		if names[st.name] {
			t.Errorf("statement %q registered twice", st.name)
		}
		names[st.name] = true
		code := codeOnly(t, st.name, st.sql)
		if positional.MatchString(code) {
			t.Errorf("%s: positional parameters (@p1, ?) are not allowed; use named @pName parameters", st.name)
		}
		declared := map[string]int{}
		for _, m := range declRe.FindAllStringSubmatch(code, -1) {
			declared[m[2]]++
		}
		for _, p := range paramsOf(t, st) {
			uses := len(regexp.MustCompile(regexp.QuoteMeta(p)+`\b`).FindAllString(code, -1))
			if declared[p] != 1 {
				t.Errorf("%s: parameter %s must be copied exactly once into a typed, sized local (DECLARE @X nvarchar(200) = %s); found %d copies", st.name, p, p, declared[p])
			}
			if uses != 1 {
				t.Errorf("%s: parameter %s is used %d times; use the typed local instead", st.name, p, uses)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Lock hints.

var (
	// FROM stageq.<table> [AS alias] [WITH (<hints>)], hints with one level of
	// parentheses (INDEX(x)).
	fromRe = regexp.MustCompile(`(?is)\bFROM\s+stageq\.(\w+)(?:\s+AS\s+\w+)?(\s+WITH\s*\(((?:[^()]|\([^()]*\))*)\))?`)
	// Any table hint list that names a lock or an index.
	hintListRe = regexp.MustCompile(`(?is)\bWITH\s*\(((?:[^()]|\([^()]*\))*)\)`)
	lockWordRe = regexp.MustCompile(`(?i)\b(UPDLOCK|READPAST|ROWLOCK|READCOMMITTEDLOCK|HOLDLOCK|SERIALIZABLE|INDEX)\b`)
	dmlWordRe  = regexp.MustCompile(`(?i)\b(SELECT|UPDATE|DELETE)\b`)
)

func hasHint(hints, h string) bool {
	return regexp.MustCompile(`(?i)\b` + h + `\b`).MatchString(hints)
}

var claimHints = []string{"UPDLOCK", "READPAST", "ROWLOCK", "READCOMMITTEDLOCK"}

// checkReadPast: READPAST is refused under READ_COMMITTED_SNAPSHOT unless the
// same table reference says READCOMMITTEDLOCK (Table Hints (Transact-SQL)).
func checkReadPast(t *testing.T, where, code string) {
	t.Helper()
	for _, m := range hintListRe.FindAllStringSubmatch(code, -1) {
		if !lockWordRe.MatchString(m[1]) {
			continue // a CTE or OPENJSON WITH, not table hints
		}
		if hasHint(m[1], "READPAST") && !hasHint(m[1], "READCOMMITTEDLOCK") {
			t.Errorf("%s: WITH (%s) has READPAST without READCOMMITTEDLOCK", where, strings.TrimSpace(m[1]))
		}
	}
}

// reads lists the FROM stageq.<table> references that belong to a SELECT (the
// nearest of SELECT, UPDATE, DELETE before them), with their hint lists.
func reads(code string) (tables, hints []string) {
	for _, loc := range fromRe.FindAllStringSubmatchIndex(code, -1) {
		before := dmlWordRe.FindAllString(code[:loc[0]], -1)
		if len(before) == 0 || !strings.EqualFold(before[len(before)-1], "SELECT") {
			continue // the FROM of an UPDATE or DELETE: the target, read with update locks
		}
		table := code[loc[2]:loc[3]]
		h := ""
		if loc[6] >= 0 {
			h = code[loc[6]:loc[7]]
		}
		tables = append(tables, table)
		hints = append(hints, h)
	}
	return tables, hints
}

func TestLockingReadsCarryTheClaimHints(t *testing.T) {
	for _, st := range statements {
		code := codeOnly(t, st.name, st.sql)
		checkReadPast(t, st.name, code)
		if !st.lockingRead {
			continue
		}
		if !regexp.MustCompile(`(?i)SET\s+TRANSACTION\s+ISOLATION\s+LEVEL\s+READ\s+COMMITTED\s*;`).MatchString(code) {
			t.Errorf("%s: a claim-path batch must SET TRANSACTION ISOLATION LEVEL READ COMMITTED (READPAST needs it)", st.name)
		}
		tables, hints := reads(code)
		for i, table := range tables {
			for _, h := range claimHints {
				if !hasHint(hints[i], h) {
					t.Errorf("%s: the read of stageq.%s lacks %s (has WITH (%s))", st.name, table, h, hints[i])
				}
			}
		}
	}
	if !strings.Contains(claimSQL, "EXEC stageq_routines.Claim") {
		t.Error("claimSQL no longer runs stageq.Claim; move the claim-path checks to wherever the claim now is")
	}
}

// ---------------------------------------------------------------------------
// Migrations.

const migrationsDir = "../../migrations/sqlserver"

// procedure is one dynamic batch of a migration: EXEC (N'CREATE PROCEDURE ...').
type procedure struct {
	file, name, body string
}

var (
	execOpenRe  = regexp.MustCompile(`(?is)\bEXEC(?:UTE)?\s*\(\s*N\s*$`)
	goLineRe    = regexp.MustCompile(`(?im)^\s*GO\s*(?:\d+\s*)?$`)
	batchFirst  = regexp.MustCompile(`(?is)\b(CREATE|ALTER|CREATE\s+OR\s+ALTER)\s+(PROC|PROCEDURE|FUNCTION|VIEW|TRIGGER)\b`)
	procNameRe  = regexp.MustCompile(`(?is)^\s*(?:CREATE|ALTER|CREATE\s+OR\s+ALTER)\s+(?:PROC|PROCEDURE)\s+([\w.\[\]]+)`)
	leadingWord = regexp.MustCompile(`(?is)^\s*(CREATE|ALTER)\b`)
)

func readMigrations(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(migrationsDir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations in %s (%v)", migrationsDir, err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(b)
	}
	return out
}

// procedures extracts the dynamic batches of a migration and checks its top
// level: no GO, and no object that must start a batch outside EXEC (N'...').
func procedures(t *testing.T, file, text string) []procedure {
	t.Helper()
	parts, err := lexTSQL(text)
	if err != nil {
		t.Fatalf("%s: %v (a quote inside EXEC (N'...') must be doubled)", file, err)
	}
	var procs []procedure
	for i, p := range parts {
		if p.kind != partString || i == 0 || parts[i-1].kind != partCode || !execOpenRe.MatchString(parts[i-1].text) {
			continue
		}
		if !leadingWord.MatchString(p.text) {
			t.Errorf("%s: a dynamic batch must start with CREATE or ALTER: %.60q", file, p.text)
		}
		if !batchFirst.MatchString(p.text) {
			// Dynamic DDL (an index on a column this batch added): not a
			// procedure, and nothing that must start a batch.
			continue
		}
		m := procNameRe.FindStringSubmatch(p.text)
		name := "?"
		if m != nil {
			name = m[1]
		}
		procs = append(procs, procedure{file: file, name: name, body: p.text})
	}
	code := joinParts(parts, blankLiteral)
	if goLineRe.MatchString(code) {
		t.Errorf("%s: has a GO line; golang-migrate sends the file as one batch and SQL Server does not know GO", file)
	}
	if m := batchFirst.FindString(code); m != "" {
		t.Errorf("%s: %q outside EXEC (N'...'): it must be the first statement of a batch", file, m)
	}
	return procs
}

const routinesDir = "../../routines/sqlserver"

// routineProcs reads the routine sources (routines/sqlserver): one procedure a
// file, plain T-SQL, its quotes not doubled. Each is written, and calls others,
// as stageq_routines.X and is read here as stageq.X, the way callers spelled
// them when the migrations created them,
// so that the checks below read routines and statements alike: the
// namespace, stageq_routines, becomes a version's schema only when installed.
func routineProcs(t *testing.T) []procedure {
	t.Helper()
	var out []procedure
	for _, glob := range []string{"*.sql", "public/*.sql"} {
		files, err := filepath.Glob(filepath.Join(routinesDir, glob))
		if err != nil || len(files) == 0 {
			t.Fatalf("no routines in %s/%s (%v)", routinesDir, glob, err)
		}
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.ReplaceAll(string(b), "stageq_routines.", "stageq.")
			m := procNameRe.FindStringSubmatch(codeOnly(t, f, text))
			if m == nil {
				t.Errorf("%s: no CREATE PROCEDURE", f)
				continue
			}
			if n := len(batchFirst.FindAllString(codeOnly(t, f, text), -1)); n != 1 {
				t.Errorf("%s: a routine file is one batch and creates exactly one object, found %d", f, n)
			}
			if goLineRe.MatchString(text) {
				t.Errorf("%s: has a GO line; the installer sends each file as one batch", f)
			}
			out = append(out, procedure{file: filepath.Base(f), name: m[1], body: text})
		}
	}
	return out
}

func TestRoutinesAreSingleBatches(t *testing.T) {
	found := map[string]bool{}
	for _, p := range routineProcs(t) {
		found[p.name] = true
	}
	for _, want := range []string{"stageq.OpenStage", "stageq.Submit", "stageq.Enqueue",
		"stageq.Claim", "stageq.Finish", "stageq.Rescue", "stageq.VNow", "stageq.StampDone",
		"stageq.Configure", "stageq.FinishMany", "stageq.AdvanceProcess", "stageq.Advance", "stageq.BodySession"} {
		if !found[want] {
			t.Errorf("procedure %s not found in %s", want, routinesDir)
		}
	}
}

// TestMigrationsCreateNoProcedures: the migrations change tables only; a
// procedure in one would be logic tied to a schema version again (it belongs
// in routines/sqlserver). Their top level is one batch: no GO.
func TestMigrationsCreateNoProcedures(t *testing.T) {
	for file, text := range readMigrations(t) {
		for _, p := range procedures(t, file, text) {
			t.Errorf("%s: creates %s; routines live in %s, versioned apart from the tables", file, p.name, routinesDir)
		}
	}
}

// existenceProbes are the procedures allowed a READUNCOMMITTED read of
// stageq.Processes to ask only whether a row exists (none today).
var existenceProbes = map[string]bool{}

// TestProceduresReadWithLocks: inside the procedures every read of a queue table
// is a locking read (READCOMMITTEDLOCK, or an update lock), so a database with
// READ_COMMITTED_SNAPSHOT on cannot make the barrier or a slot count read a stale
// version; READPAST always comes with READCOMMITTEDLOCK; and the claim takes its
// task with all four claim hints.
func TestProceduresReadWithLocks(t *testing.T) {
	queueTables := map[string]bool{"Tasks": true, "Processes": true, "Limits": true, "Schedules": true, "ExclusiveLeases": true}
	sawClaim := false
	for _, p := range routineProcs(t) {
		{
			where := p.file + ": " + p.name
			body := codeOnly(t, where, p.body)
			checkReadPast(t, where, body)
			tables, hints := reads(body)
			for i, table := range tables {
				if !queueTables[table] {
					continue
				}
				if existenceProbes[p.name] && table == "Processes" && hasHint(hints[i], "READUNCOMMITTED") {
					continue
				}
				if !hasHint(hints[i], "READCOMMITTEDLOCK") && !hasHint(hints[i], "UPDLOCK") {
					t.Errorf("%s: the read of stageq.%s is not a locking read (WITH (%s))", where, table, hints[i])
				}
			}
			if !strings.EqualFold(p.name, "stageq.Claim") {
				continue
			}
			sawClaim = true
			took := false
			for i, table := range tables {
				if table == "Tasks" && hasHint(hints[i], "UPDLOCK") {
					took = true
					for _, h := range claimHints {
						if !hasHint(hints[i], h) {
							t.Errorf("%s: the task it takes is read without %s (WITH (%s))", where, h, hints[i])
						}
					}
				}
			}
			if !took {
				t.Errorf("%s: no read of stageq.Tasks WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)", where)
			}
			for _, want := range []string{`SET\s+TRANSACTION\s+ISOLATION\s+LEVEL\s+READ\s+COMMITTED`, `SET\s+XACT_ABORT\s+ON`, `OUTPUT\s+inserted\.`, `INSERT\s+INTO\s+stageq\.Logs`} {
				if !regexp.MustCompile(`(?is)` + want).MatchString(body) {
					t.Errorf("%s: missing %s", where, want)
				}
			}
		}
	}
	if !sawClaim {
		t.Error("stageq.Claim not found in the routines")
	}
}

// ---------------------------------------------------------------------------
// The Go source.

var (
	helpers   = map[string]bool{"nvarchar": true, "bigint": true, "integer": true, "bit": true, "datetime2": true}
	execFuncs = map[string]bool{"ExecContext": true, "QueryContext": true, "QueryRowContext": true}
	// senders are the package's own helpers (rows.go, and the few beside their
	// callers: schedule.go, worker.go) that send their query as
	// d.db.QueryContext(ctx, query, args...) does: the index of the query among
	// a call's arguments, and where the query's arguments start. Their bodies
	// may only pass that query and those arguments on, unchanged.
	senders = map[string]struct{ query, args int }{
		"queryAll":     {3, 5}, // queryAll(ctx, d, mode, query, scan, args...)
		"exec":         {2, 3}, // d.exec(ctx, mode, query, args...)
		"queryCount":   {2, 3}, // d.queryCount(ctx, mode, query, args...)
		"listAll":      {3, 5}, // listAll(ctx, d, what, query, scan, args...)
		"updateWorker": {3, 4}, // d.updateWorker(ctx, what, id, query, args...)
	}
)

// receiverType names fd's receiver type ("" for a function).
func receiverType(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if st, ok := t.(*ast.StarExpr); ok {
		t = st.X
	}
	id, _ := t.(*ast.Ident)
	if id == nil {
		return ""
	}
	return id.Name
}

// paramNames lists a function's parameter names in order (the receiver left
// out), so that a call's argument i is parameter i.
func paramNames(fd *ast.FuncDecl) []string {
	var out []string
	for _, field := range fd.Type.Params.List {
		for _, n := range field.Names {
			out = append(out, n.Name)
		}
	}
	return out
}

func parsePackage(t *testing.T) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// decls lists the top-level declarations of files.
func decls(files []*ast.File) []ast.Decl {
	var out []ast.Decl
	for _, f := range files {
		out = append(out, f.Decls...)
	}
	return out
}

// TestGoSendsOnlyRegisteredConstants: every database call passes a registered
// constant as its SQL and typed helpers as its arguments, naming exactly the
// statement's parameters; no SQL is built at run time with +, fmt.Sprint* or
// strings.Join (a statement constant may join fragment constants, which Go
// does at compile time).
func TestGoSendsOnlyRegisteredConstants(t *testing.T) {
	fset, files := parsePackage(t)

	// consts maps each *SQL constant to its text. A statement may be written as
	// a concatenation of string literals and of unexported fragment constants
	// (a name not ending in SQL: a prologue several statements share), which Go
	// joins at compile time; nothing else is allowed.
	consts := map[string]string{}
	specs := map[string]ast.Expr{}
	for _, decl := range decls(files) {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					specs[name.Name] = vs.Values[i]
				}
			}
		}
	}
	var textOf func(e ast.Expr) (string, bool)
	textOf = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			v, err := strconv.Unquote(e.Value)
			return v, err == nil
		case *ast.ParenExpr:
			return textOf(e.X)
		case *ast.Ident:
			if strings.HasSuffix(e.Name, "SQL") || specs[e.Name] == nil {
				return "", false // a statement is never part of another
			}
			return textOf(specs[e.Name])
		case *ast.BinaryExpr:
			if e.Op != token.ADD {
				return "", false
			}
			x, ok := textOf(e.X)
			y, ok2 := textOf(e.Y)
			return x + y, ok && ok2
		}
		return "", false
	}
	for name, expr := range specs {
		if !strings.HasSuffix(name, "SQL") {
			continue
		}
		v, ok := textOf(expr)
		if !ok {
			t.Errorf("%s: const %s must be string literals and fragment constants joined by +", fset.Position(expr.Pos()), name)
			continue
		}
		consts[name] = v
	}
	known := func(name string) bool { _, ok := consts[name]; return ok }
	registered := map[string]statement{}
	for _, st := range statements {
		registered[st.sql] = st
	}
	for name, v := range consts {
		if _, ok := registered[v]; !ok {
			t.Errorf("const %s is not listed in statements.go", name)
		}
	}

	called := map[string]bool{}
	// forwards reports a call, inside the body of sender fd, that passes on
	// exactly fd's own query parameter and its variadic arguments (args...):
	// what it sends is checked where fd is called.
	forwards := func(fd *ast.FuncDecl, call *ast.CallExpr, queryAt, argsAt int) bool {
		s, ok := senders[fd.Name.Name]
		if !ok {
			return false
		}
		params := paramNames(fd)
		if s.query >= len(params) || s.args != len(params)-1 || len(call.Args) != argsAt+1 || !call.Ellipsis.IsValid() {
			return false
		}
		q, ok := call.Args[queryAt].(*ast.Ident)
		a, ok2 := call.Args[argsAt].(*ast.Ident)
		return ok && ok2 && q.Name == params[s.query] && a.Name == params[s.args]
	}
	// checkSent checks one query a call sends: a registered *SQL constant
	// (possibly rendered by d.calls.SQL), given exactly its parameters, each
	// built by a typed helper with a literal name.
	checkSent := func(pos token.Position, fn string, query ast.Expr, args []ast.Expr) {
		orig := query
		if c, ok := query.(*ast.CallExpr); ok && len(c.Args) == 1 {
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "SQL" {
				query = c.Args[0]
			}
		}
		id, ok := query.(*ast.Ident)
		if _, known := consts[id.Name]; !ok || !known {
			t.Errorf("%s: %s must be given a *SQL constant, got %T", pos, fn, orig)
			return
		}
		called[id.Name] = true
		sqlText := consts[id.Name]
		st := registered[sqlText]
		var passed []string
		for _, a := range args {
			c, ok := a.(*ast.CallExpr)
			var helper *ast.Ident
			if ok {
				helper, _ = c.Fun.(*ast.Ident)
			}
			if helper == nil || !helpers[helper.Name] || len(c.Args) == 0 {
				t.Errorf("%s: argument of %s must be built by nvarchar, bigint, integer, bit or datetime2", pos, id.Name)
				continue
			}
			lit, ok := c.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: parameter name of %s must be a string literal", pos, id.Name)
				continue
			}
			name, _ := strconv.Unquote(lit.Value)
			passed = append(passed, "@"+name)
		}
		sort.Strings(passed)
		want := paramsOf(t, st)
		if strings.Join(passed, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %s passes %v, the statement uses %v", pos, id.Name, passed, want)
		}
	}
	for _, decl := range decls(files) {
		inFunc, _ := decl.(*ast.FuncDecl) // nil outside a function
		switch {
		case inFunc != nil && inFunc.Name.Name == "newBase":
			// The statements sqlbase sends (by position, named by bound):
			// TestBaseStatementsBind checks their parameters.
			ast.Inspect(inFunc.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok && known(id.Name) {
					called[id.Name] = true
				}
				return true
			})
			continue
		case inFunc != nil && receiverType(inFunc) == "bound":
			continue // passes on the query sqlbase gave it
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op == token.ADD {
					for _, side := range []ast.Expr{n.X, n.Y} {
						if id, ok := side.(*ast.Ident); ok && known(id.Name) {
							t.Errorf("%s: SQL constant %s used in a concatenation", fset.Position(n.Pos()), id.Name)
						}
					}
				}
			case *ast.CallExpr:
				// The senders (queryAll(ctx, d, mode, query, scan, args...),
				// listAll(ctx, d, what, query, scan, args...), d.exec and
				// d.queryCount(ctx, mode, query, args...)) and
				// dialect.QueryAll(ctx, db, mapErr, query, scan, args...) send
				// their query as d.db.QueryContext(ctx, query, args...) does, and
				// dialect.CollectProcessStatus(ctx, db, f, q1, q2, q3, mapErr,
				// args...) sends each of its three queries with the same args.
				name, queryAts, argsAt := "", []int{1}, 2
				if fn, ok := n.Fun.(*ast.Ident); ok {
					if s, ok := senders[fn.Name]; ok {
						name, queryAts, argsAt = fn.Name, []int{s.query}, s.args
					}
				} else if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					pkg, _ := sel.X.(*ast.Ident)
					if pkg != nil && ((pkg.Name == "fmt" && strings.HasPrefix(sel.Sel.Name, "Sprint")) ||
						(pkg.Name == "strings" && (sel.Sel.Name == "Join" || sel.Sel.Name == "Builder"))) {
						t.Errorf("%s: %s.%s in the dialect; SQL is never built at run time (errors use fmt.Errorf)", fset.Position(n.Pos()), pkg.Name, sel.Sel.Name)
					}
					s, isSender := senders[sel.Sel.Name]
					switch {
					case pkg != nil && pkg.Name == "dialect" && sel.Sel.Name == "CollectProcessStatus":
						name, queryAts, argsAt = sel.Sel.Name, []int{3, 4, 5}, 7
					case pkg != nil && pkg.Name == "dialect" && sel.Sel.Name == "QueryAll":
						name, queryAts, argsAt = sel.Sel.Name, []int{3}, 5
					case isSender:
						name, queryAts, argsAt = sel.Sel.Name, []int{s.query}, s.args
					case execFuncs[sel.Sel.Name]:
						name = sel.Sel.Name
					}
				}
				if name == "" {
					return true
				}
				pos := fset.Position(n.Pos())
				if len(n.Args) < argsAt {
					t.Errorf("%s: %s without a query", pos, name)
					return true
				}
				if len(queryAts) == 1 && inFunc != nil && forwards(inFunc, n, queryAts[0], argsAt) {
					return true
				}
				for _, at := range queryAts {
					checkSent(pos, name, n.Args[at], n.Args[argsAt:])
				}
			}
			return true
		})
	}
	for _, st := range statements {
		if st.byInstaller {
			continue
		}
		found := false
		for name := range called {
			if consts[name] == st.sql {
				found = true
			}
		}
		if !found {
			t.Errorf("statement %q is registered but never sent", st.name)
		}
	}
}

// ---------------------------------------------------------------------------
// Variable names and the collation.

// varRe matches a T-SQL variable or parameter (@Name), not a system function
// (@@ROWCOUNT): the lookbehind is done by hand in caseOnlyNameClashes.
var varRe = regexp.MustCompile(`@@?\w+`)

// caseOnlyNameClashes reports the variable names of one batch or procedure that
// are equal case-insensitively but spelled differently. T-SQL variable and
// parameter names follow the database's collation (SQL Server's default one is
// case-insensitive), so @Pid beside @pId is error 134 ("already declared") there
// even though it compiles on a case-sensitive collation.
func caseOnlyNameClashes(code string) []string {
	spellings := map[string]map[string]bool{}
	for _, v := range varRe.FindAllString(code, -1) {
		if strings.HasPrefix(v, "@@") {
			continue
		}
		k := strings.ToLower(v)
		if spellings[k] == nil {
			spellings[k] = map[string]bool{}
		}
		spellings[k][v] = true
	}
	var out []string
	for _, s := range spellings {
		if len(s) < 2 {
			continue
		}
		names := make([]string, 0, len(s))
		for n := range s {
			names = append(names, n)
		}
		sort.Strings(names)
		out = append(out, strings.Join(names, " and "))
	}
	sort.Strings(out)
	return out
}

func TestVariableNamesDifferInMoreThanCase(t *testing.T) {
	if got := caseOnlyNameClashes("DECLARE @Pid int = @pPid, @Id nvarchar(10) = @pId; SELECT @@ROWCOUNT, @@rowcount;"); len(got) != 1 || got[0] != "@Pid and @pId" {
		t.Fatalf("the check itself is broken: it found %v in a batch that declares @Pid beside @pId", got)
	}
	for _, st := range statements {
		for _, c := range caseOnlyNameClashes(codeOnly(t, st.name, st.sql)) {
			t.Errorf("%s: %s differ only in case; on a case-insensitive collation they are one variable (error 134)", st.name, c)
		}
	}
	for file, text := range readMigrations(t) {
		// The top level of a migration file is one batch too.
		for _, c := range caseOnlyNameClashes(codeOnly(t, file, text)) {
			t.Errorf("%s (top-level batch): %s differ only in case", file, c)
		}
	}
	for _, p := range routineProcs(t) {
		where := p.file + ": " + p.name
		for _, c := range caseOnlyNameClashes(codeOnly(t, where, p.body)) {
			t.Errorf("%s: %s differ only in case; on a case-insensitive collation they are one variable (error 134)", where, c)
		}
	}
}

// ---------------------------------------------------------------------------
// Kind limits.

// TestKindLimitKeysAreNotCut: a kind limit's key is "kind:" and the whole kind,
// so the column, the claim's @KindKey and the statements that write or delete a
// limit must hold 205 characters; cut to 200, two kinds that share their first
// 195 characters would share one limit.
func TestKindLimitKeysAreNotCut(t *testing.T) {
	want := len("kind:") + maxName
	if got := limitKeyMax("kind:" + strings.Repeat("k", 200)); got != want {
		t.Errorf("limitKeyMax(kind: + 200) = %d, want %d", got, want)
	}
	if err := checkLen("limit key", "kind:"+strings.Repeat("k", 200), limitKeyMax("kind:"+strings.Repeat("k", 200))); err != nil {
		t.Errorf("a kind limit for a 200-character kind is refused: %v", err)
	}
	if err := checkLen("limit key", strings.Repeat("k", 201), limitKeyMax(strings.Repeat("k", 201))); err == nil {
		t.Error("a 201-character named limit key is accepted")
	}
	sizeRe := func(re string) *regexp.Regexp { return regexp.MustCompile(`(?is)` + re + `\s+nvarchar\((\d+)\)`) }
	size := func(where, text string, re *regexp.Regexp) int {
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: %s not found", where, re)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for file, text := range readMigrations(t) {
		if !strings.Contains(file, ".up.") || !strings.Contains(text, "CREATE TABLE stageq.Limits") {
			continue
		}
		if n := size(file, text, sizeRe(`CREATE TABLE stageq\.Limits\s*\(\s*\[key\]`)); n != want {
			t.Errorf("%s: stageq.Limits.[key] is nvarchar(%d), want nvarchar(%d)", file, n, want)
		}
		if n := size(file, text, sizeRe(`\bkind`)); n != maxName {
			t.Errorf("%s: stageq.Tasks.kind is nvarchar(%d), want nvarchar(%d)", file, n, maxName)
		}
	}
	for _, p := range routineProcs(t) {
		body := codeOnly(t, p.file+": "+p.name, p.body)
		if !strings.Contains(body, "@KindKey") {
			continue
		}
		if n := size(p.name, body, sizeRe(`@KindKey`)); n != want {
			t.Errorf("%s: @KindKey is nvarchar(%d), want nvarchar(%d)", p.name, n, want)
		}
		if regexp.MustCompile(`(?is)(LEFT|SUBSTRING)\s*\(\s*CONCAT\s*\(\s*N''\s*,\s*@Kind`).MatchString(body) {
			t.Errorf("%s: the kind limit key is cut", p.name)
		}
	}
	for _, st := range []string{limitUpsertSQL, limitDeleteSQL} {
		if n := size("limit statement", st, sizeRe(`@Key`)); n != want {
			t.Errorf("a limit statement declares @Key nvarchar(%d), want nvarchar(%d)", n, want)
		}
	}
}

// ---------------------------------------------------------------------------
// Lock escalation.

var (
	tasksWriteRe = regexp.MustCompile(`(?is)\b(INSERT\s+INTO\s+stageq\.Tasks\b|(UPDATE|DELETE)\s+(TOP\s*\(\s*\d+\s*\)\s*)?\w+\b.*\bFROM\s+stageq\.Tasks\b|(UPDATE|DELETE\s+FROM)\s+stageq\.Tasks\b)`)
	// Bounded writes: one task by id; a worker's own running tasks (at most its
	// concurrency); TOP (n); or a chunk ending at @ChunkEnd.
	oneRowRe    = regexp.MustCompile(`(?i)\b\w+\.id\s*=\s*@\w+|\bWHERE\s+id\s*=\s*@\w+|\bworker_id\s*=\s*@WorkerId\b|\b(UPDATE|DELETE)\s+TOP\s*\(\s*\d+\s*\)`)
	chunkRe     = regexp.MustCompile(`@ChunkEnd\b`)
	chunkStepRe = regexp.MustCompile(`(?i)@ChunkEnd\s*=\s*@ChunkStart\s*\+\s*(\d+)|TOP\s*\(\s*(\d+)\s*\)`)
)

// boundedVars lists the table variables a procedure fills with at most 1,000
// rows: INSERT INTO @X ... SELECT TOP (n) with n <= 1000, or a THROW when
// (SELECT COUNT(*) FROM @X) > n with n <= 1000.
func boundedVars(code string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?is)INSERT\s+INTO\s+@(\w+)[^;]*?\bSELECT\s+TOP\s*\(\s*(\d+)\s*\)`).FindAllStringSubmatch(code, -1) {
		if n, _ := strconv.Atoi(m[2]); n <= 1000 && !strings.Contains(m[0], ";") {
			out[strings.ToLower(m[1])] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?is)\(\s*SELECT\s+COUNT\(\*\)\s+FROM\s+@(\w+)\s*\)\s*>\s*(\d+)\s+THROW\b`).FindAllStringSubmatch(code, -1) {
		if n, _ := strconv.Atoi(m[2]); n <= 1000 {
			out[strings.ToLower(m[1])] = true
		}
	}
	return out
}

// joinsBounded: the statement reads rows from a bounded table variable, so the
// write touches at most that many tasks, one per row, by key.
var joinsVarRe = regexp.MustCompile(`(?i)\b(?:FROM|JOIN)\s+@(\w+)`)

func joinsBounded(stmt string, bounded map[string]bool) bool {
	for _, m := range joinsVarRe.FindAllStringSubmatch(stmt, -1) {
		if bounded[strings.ToLower(m[1])] {
			return true
		}
	}
	return false
}

// checkTaskWrites: a statement that writes stageq.Tasks either names one task by
// id, works on a chunk bounded by @ChunkEnd of at most 1,000 tasks, or joins a
// table variable the procedure bounds to 1,000 rows (boundedVars). SQL Server
// tries to escalate a statement's row locks to a table lock once it holds 5,000
// locks on one index (Lock escalation, in the locking guide), and READPAST passes
// over locked rows, never a locked table: one large Submit, OpenStage or schedule
// tick would stall every worker until it commits.
func checkTaskWrites(code string) []string {
	var problems []string
	bounded := boundedVars(code)
	// Statements are cut at ';' and BEGIN (CASE ... ELSE ... END stays whole).
	for _, stmt := range regexp.MustCompile(`;|\bBEGIN\b`).Split(code, -1) {
		if !tasksWriteRe.MatchString(stmt) {
			continue
		}
		if oneRowRe.MatchString(stmt) || chunkRe.MatchString(stmt) || joinsBounded(stmt, bounded) {
			continue
		}
		problems = append(problems, fmt.Sprintf("a write of stageq.Tasks neither names one task by id nor is bounded by @ChunkEnd: %.120q",
			strings.Join(strings.Fields(stmt), " ")))
	}
	for _, m := range chunkStepRe.FindAllStringSubmatch(code, -1) {
		n := m[1]
		if n == "" {
			n = m[2]
		}
		if v, _ := strconv.Atoi(n); v > 1000 {
			problems = append(problems, fmt.Sprintf("a chunk of %d tasks; keep chunks at 1,000 or fewer, far below the 5,000 locks that trigger escalation", v))
		}
	}
	return problems
}

func TestTaskWritesStayBelowLockEscalation(t *testing.T) {
	if len(checkTaskWrites("UPDATE t SET state = 'x' FROM stageq.Tasks AS t WHERE t.process_id = @P;")) != 1 ||
		len(checkTaskWrites("SET @ChunkEnd = @ChunkStart + 4999;")) != 1 {
		t.Fatal("the check itself is broken: an unbounded UPDATE of stageq.Tasks or a 5,000-task chunk passed")
	}
	if !chunkRe.MatchString(scheduleTagSQL) {
		t.Error("schedule tag: the tasks of a tick are not stamped in chunks")
	}
	for _, st := range statements {
		for _, p := range checkTaskWrites(codeOnly(t, st.name, st.sql)) {
			t.Errorf("%s: %s", st.name, p)
		}
	}
	for _, p := range routineProcs(t) {
		{
			where := p.file + ": " + p.name
			for _, problem := range checkTaskWrites(codeOnly(t, where, p.body)) {
				t.Errorf("%s: %s", where, problem)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Procedure calls.

var (
	procHeaderRe = regexp.MustCompile(`(?is)^\s*(?:CREATE|ALTER|CREATE\s+OR\s+ALTER)\s+(?:PROC|PROCEDURE)\s+([\w.]+)(.*?)\bAS\s+BEGIN\b`)
	procParamRe  = regexp.MustCompile(`(?is)@(\w+)\s+[\w()]+(?:\(\s*(?:\d+|max)\s*\))?\s*(=)?`)
	execCallRe   = regexp.MustCompile(`(?is)\bEXEC(?:UTE)?\s+stageq\.(\w+)\b([^;]*)`)
	namedArgRe   = regexp.MustCompile(`(?i)@(\w+)\s*=`)
)

// procParams maps each procedure, as the routines define it, to its
// parameters (lower case) and whether each has a default.
func procParams(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for _, p := range routineProcs(t) {
		m := procHeaderRe.FindStringSubmatch(codeOnly(t, p.name, p.body))
		if m == nil {
			t.Errorf("%s: %s: no parameter list before AS BEGIN", p.file, p.name)
			continue
		}
		params := map[string]bool{}
		for _, pm := range procParamRe.FindAllStringSubmatch(m[2], -1) {
			params[strings.ToLower(pm[1])] = pm[2] == "="
		}
		out[strings.ToLower(strings.TrimPrefix(m[1], "stageq."))] = params
	}
	return out
}

// checkCalls reports calls of stageq procedures in code that pass a parameter
// the procedure does not declare or leave out one without a default.
func checkCalls(code string, procs map[string]map[string]bool) []string {
	var problems []string
	for _, m := range execCallRe.FindAllStringSubmatch(code, -1) {
		name := strings.ToLower(m[1])
		params, ok := procs[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("EXEC stageq.%s: no such procedure in the migrations", m[1]))
			continue
		}
		passed := map[string]bool{}
		for _, a := range namedArgRe.FindAllStringSubmatch(m[2], -1) {
			arg := strings.ToLower(a[1])
			passed[arg] = true
			if _, ok := params[arg]; !ok {
				problems = append(problems, fmt.Sprintf("EXEC stageq.%s passes @%s, which it does not declare", m[1], a[1]))
			}
		}
		for p, hasDefault := range params {
			if !hasDefault && !passed[p] {
				problems = append(problems, fmt.Sprintf("EXEC stageq.%s leaves out @%s, which has no default", m[1], p))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// TestProcedureCallsMatchTheirParameters: every EXEC stageq.X in the Go
// statements and inside the procedures names X's parameters as the newest
// migration declares them (by name: T-SQL binds named arguments by name and
// refuses an unknown one only at run time, error 8145), and passes every
// parameter that has no default (error 201).
func TestProcedureCallsMatchTheirParameters(t *testing.T) {
	procs := procParams(t)
	if p := checkCalls("EXEC stageq.FinishMany @Result = @R;", procs); len(p) != 2 {
		t.Fatalf("the check itself is broken: a misspelt argument gave %v", p)
	}
	for _, want := range []string{"claim", "finishmany", "finish", "advance", "advanceprocess", "rescue", "openstage", "configure", "submit", "vnow", "stampdone"} {
		if procs[want] == nil {
			t.Errorf("procedure stageq.%s not found", want)
		}
	}
	if _, ok := procs["refreshprocess"]; ok {
		// Dropped by migration 2, but still defined by 1: the map keeps the newest
		// definition only, so nothing may call it.
		for _, st := range statements {
			if strings.Contains(strings.ToLower(st.sql), "stageq.refreshprocess") {
				t.Errorf("%s: calls stageq.RefreshProcess, which migration 2 drops", st.name)
			}
		}
	}
	for _, st := range statements {
		for _, p := range checkCalls(codeOnly(t, st.name, st.sql), procs) {
			t.Errorf("%s: %s", st.name, p)
		}
	}
	for _, p := range routineProcs(t) {
		for _, problem := range checkCalls(codeOnly(t, p.name, p.body), procs) {
			t.Errorf("%s: %s: %s", p.file, p.name, problem)
		}
	}
}
