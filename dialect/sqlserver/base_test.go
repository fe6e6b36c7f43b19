package sqlserver

import (
	"context"
	"database/sql"
	"go/ast"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect/sqlbase"
	_ "modernc.org/sqlite"
)

// baseArgs are the arguments sqlbase passes each statement SQL Server gives it,
// in sqlbase's documented order ("In:" of sqlbase.Statements and
// LeaseStatements), with the Go types it passes them as.
var baseArgs = map[string][]struct {
	param string
	value any
}{
	"lock process":       {{"pName", ""}},
	"lock process by id": {{"pProcessId", int64(0)}},
	"pause":              {{"pProcessId", int64(0)}, {"pPaused", false}},
	"audit failed":       {{"pProcessId", int64(0)}, {"pWho", ""}, {"pOutcome", ""}, {"pNote", ""}},
	"retry process":      {{"pProcessId", int64(0)}},
	"discard process":    {{"pProcessId", int64(0)}},
	"cancel process":     {{"pProcessId", int64(0)}, {"pWho", ""}, {"pOutcome", ""}, {"pNote", ""}},
	"running":            {{"pProcessId", int64(0)}},
	"task process":       {{"pTaskId", int64(0)}},
	"task lock":          {{"pTaskId", int64(0)}},
	"audit task":         {{"pTaskId", int64(0)}, {"pWho", ""}, {"pOutcome", ""}, {"pNote", ""}},
	"retry task":         {{"pTaskId", int64(0)}},
	"delete task":        {{"pTaskId", int64(0)}},
	"log list": {{"pProcess", ""}, {"pTaskId", int64(0)}, {"pWorkerId", ""}, {"pOutcome", ""},
		{"pSince", time.Time{}}, {"pLimit", 0}, {"pAfterId", int64(0)}, {"pProcessId", int64(0)}},
	"log list, newest": {{"pProcess", ""}, {"pTaskId", int64(0)}, {"pWorkerId", ""}, {"pOutcome", ""},
		{"pSince", time.Time{}}, {"pLimit", 0}, {"pAfterId", int64(0)}, {"pProcessId", int64(0)}},
	"task list":       {{"pProcess", ""}, {"pState", ""}, {"pLimit", 0}, {"pKind", ""}},
	"process get":     {{"pName", ""}},
	"process list":    {{"pName", ""}, {"pAll", false}, {"pLimit", 0}},
	"stage count":     {{"pName", ""}, {"pAll", false}, {"pLimit", 0}},
	"stage done":      {{"pName", ""}, {"pAll", false}, {"pLimit", 0}},
	"worker list":     {},
	"limit upsert":    {{"pKey", ""}, {"pMax", 0}},
	"limit delete":    {{"pKey", ""}},
	"limit list":      {{"pKey", ""}},
	"lease acquire":   {{"pName", ""}, {"pHolder", ""}, {"pTtlMs", int64(0)}},
	"lease get":       {{"pName", ""}},
	"lease extend":    {{"pName", ""}, {"pHolder", ""}, {"pToken", int64(0)}, {"pTtlMs", int64(0)}},
	"lease release":   {{"pName", ""}, {"pHolder", ""}, {"pToken", int64(0)}},
	"lease list":      {{"pName", ""}, {"pHeldOnly", false}},
	"prune logs":      {{"pAgeMs", int64(0)}, {"pBatch", 0}},
	"prune workers":   {{"pAgeMs", int64(0)}, {"pBatch", 0}},
	"prune processes": {{"pAgeMs", int64(0)}, {"pBatch", 0}},
	"prune record": {{"pWorkerId", ""}, {"pLogsDeleted", int64(0)}, {"pWorkersDeleted", int64(0)},
		{"pProcessesDeleted", int64(0)}, {"pRetainLogsS", int64(0)}, {"pRetainWorkersS", int64(0)},
		{"pRetainProcessesS", int64(0)}},
	"prune last":        {},
	"schedule list":     {{"pName", ""}},
	"schedule pause":    {{"pName", ""}, {"pPaused", false}},
	"schedule delete":   {{"pName", ""}},
	"schedule next due": {},
	"schedule run list": {{"pName", ""}, {"pLimit", 0}},
	"clock now":         {},
	"schedule create": {{"pName", ""}, {"pCron", sql.NullString{}}, {"pIntervalMs", sql.NullInt64{}}, {"pPlan", ""},
		{"pMissed", ""}, {"pGraceMs", int64(0)}, {"pSingleton", false}, {"pPaused", false}, {"pNextRun", time.Time{}}},
	"schedule lock due":   {},
	"schedule lock":       {{"pName", ""}},
	"schedule unfinished": {{"pName", ""}},
	"schedule tag":        {{"pName", ""}, {"pScheduledFor", time.Time{}}, {"pTaskIds", ""}},
	"schedule run": {{"pScheduleId", int64(0)}, {"pScheduledFor", time.Time{}}, {"pOutcome", ""},
		{"pProcessId", sql.NullInt64{}}, {"pTaskCount", 0}, {"pWorkerId", ""}},
	"schedule advance": {{"pScheduleId", int64(0)}, {"pPrevNextRun", time.Time{}}, {"pNextRun", time.Time{}},
		{"pScheduledFor", time.Time{}}, {"pOutcome", ""}, {"pWorkerId", ""}},
	"schedule touch":      {{"pScheduleId", int64(0)}, {"pScheduledFor", time.Time{}}, {"pOutcome", ""}, {"pWorkerId", ""}},
	"schedule prune runs": {{"pScheduleId", int64(0)}, {"pPruneBefore", time.Time{}}},
}

// givenStatements lists the statements newBase sets, by text (each string
// field of its statement structs that is not empty).
func givenStatements(b sqlbase.Base) map[string]bool {
	out := map[string]bool{}
	for _, v := range []any{b.SQL, b.Limits, b.Lease, b.Retention, b.Schedule} {
		rv := reflect.ValueOf(v)
		for i := 0; i < rv.NumField(); i++ {
			if f := rv.Field(i); f.Kind() == reflect.String && f.String() != "" {
				out[f.String()] = true
			}
		}
	}
	return out
}

// declaredFor is the local type (declRe's first group, lower case) each Go
// type bound declares may be copied into.
var declaredFor = map[string]*regexp.Regexp{
	"string":         regexp.MustCompile(`^n?varchar\(`),
	"sql.NullString": regexp.MustCompile(`^n?varchar\(`),
	"sql.NullInt64":  regexp.MustCompile(`^bigint$`),
	"int":            regexp.MustCompile(`^int$`),
	"int64":          regexp.MustCompile(`^bigint$`),
	"bool":           regexp.MustCompile(`^bit$`),
	"time.Time":      regexp.MustCompile(`^datetime2\(`),
}

// TestBaseStatementsBind pins the contract between sqlbase and the statements
// SQL Server gives it: each one's parameters, in the order they appear, are
// the arguments sqlbase passes in that order, each copied into a local of the
// type its Go value is declared as; and bound names them so.
func TestBaseStatementsBind(t *testing.T) {
	var d SQLServer
	given := givenStatements(d.newBase())
	seen := map[string]bool{}
	for _, st := range statements {
		if !given[st.sql] {
			continue
		}
		delete(given, st.sql)
		name := st.name
		seen[name] = true
		want, ok := baseArgs[name]
		if !ok {
			t.Errorf("newBase gives statement %q, which baseArgs does not list", name)
			continue
		}
		var wantNames []string
		var args []any
		for _, a := range want {
			wantNames = append(wantNames, a.param)
			args = append(args, a.value)
		}
		if got := paramsInOrder(st.sql); !slices.Equal(got, wantNames) {
			t.Errorf("%s: parameters in order %v, sqlbase passes %v", name, got, wantNames)
			continue
		}
		bound, err := bindArgs(st.sql, args)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		code := codeOnly(t, name, st.sql)
		for i, a := range want {
			if got := bound[i].(sql.NamedArg).Name; got != a.param {
				t.Errorf("%s: argument %d bound as @%s, want @%s", name, i, got, a.param)
			}
			var typ string
			for _, m := range declRe.FindAllStringSubmatch(code, -1) {
				if m[2] == "@"+a.param {
					typ = strings.ToLower(strings.ReplaceAll(m[1], " ", ""))
				}
			}
			goType := typeName(a.value)
			if strings.HasPrefix(goType, "sql.Null") {
				// Sent as '' or 0 (bindArgs): the statement must read it back as NULL.
				local := regexp.MustCompile(`(@\w+)\s+[^=,]+=\s*@` + a.param + `\b`).FindStringSubmatch(code)
				if local == nil || !regexp.MustCompile(`(?i)NULLIF\(\s*`+local[1]+`\s*,`).MatchString(code) {
					t.Errorf("%s: @%s may be NULL, sent as its zero value; read its local with NULLIF", name, a.param)
				}
			}
			if re := declaredFor[goType]; re == nil || !re.MatchString(typ) {
				t.Errorf("%s: @%s is copied into a %s local, sqlbase passes a %s", name, a.param, typ, goType)
			}
		}
	}
	for name := range baseArgs {
		if !seen[name] {
			t.Errorf("baseArgs lists %q, which newBase does not give", name)
		}
	}
	if len(given) > 0 {
		t.Errorf("%d statements given to sqlbase are not registered in statements.go", len(given))
	}
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int:
		return "int"
	case int64:
		return "int64"
	case bool:
		return "bool"
	case time.Time:
		return "time.Time"
	case sql.NullString:
		return "sql.NullString"
	case sql.NullInt64:
		return "sql.NullInt64"
	}
	return "?"
}

// TestBindArgsRefusesAMismatch: too few or too many arguments, or one of a
// type without a fixed declaration, is an error before anything is sent.
func TestBindArgsRefusesAMismatch(t *testing.T) {
	for _, args := range [][]any{{}, {"a", "b"}, {1.5}, {sql.Named("pName", "a"), "b"}} {
		if _, err := bindArgs(processGetSQL, args); err == nil {
			t.Errorf("bindArgs(processGetSQL, %v): no error", args)
		}
	}
}

// takenFromBase are the methods SQL Server leaves to sqlbase.Base, whose
// statements newBase sets. Every other method of Base is SQL Server's own,
// which checks lengths and then calls Base.
var takenFromBase = []string{
	"ClockNow", "LeaseList", "LimitGet", "LimitList", "LogList", "ProcessCancel", "ProcessConfigure",
	"ProcessDiscard", "ProcessGet", "ProcessList", "ProcessRetry", "ProcessSetPaused", "PruneLast", "PruneLogs",
	"PruneProcesses", "PruneRecord", "PruneWorkers", "ScheduleDelete", "ScheduleFire", "ScheduleList",
	"ScheduleLock", "ScheduleLockDue", "ScheduleNextDue", "ScheduleRunList", "ScheduleSetPaused",
	"ScheduleUnfinished", "TaskCancel", "TaskDiscard", "TaskList", "TaskRetry", "WorkerList",
}

// TestBaseMethodsTaken: the methods of sqlbase.Base that SQL Server does not
// declare itself are exactly takenFromBase.
func TestBaseMethodsTaken(t *testing.T) {
	_, files := parsePackage(t)
	own := map[string]bool{}
	for _, decl := range decls(files) {
		if fd, ok := decl.(*ast.FuncDecl); ok && receiverType(fd) == "SQLServer" {
			own[fd.Name.Name] = true
		}
	}
	var taken []string
	bt := reflect.TypeOf(&sqlbase.Base{})
	for i := 0; i < bt.NumMethod(); i++ {
		if name := bt.Method(i).Name; !own[name] {
			taken = append(taken, name)
		}
	}
	if !slices.Equal(taken, takenFromBase) {
		t.Errorf("SQL Server takes %v from sqlbase.Base, want %v", taken, takenFromBase)
	}
}

// TestBoundRowCarriesABindError: a statement given arguments that do not fit
// it fails at Scan with the binding error, without running (here on SQLite's
// driver, which would run SELECT 1 happily).
func TestBoundRowCarriesABindError(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	err = bound{db}.QueryRowContext(context.Background(), "SELECT 1 -- @pOne", "a", "b").Scan(&n)
	if err == nil || !strings.Contains(err.Error(), "given 2 arguments") {
		t.Fatalf("Scan: %v, want the binding error", err)
	}
}

// TestBaseStepsSet: SQL Server leaves every method of sqlbase.Base to it (or
// calls it after a check), so every step Base may call is set.
func TestBaseStepsSet(t *testing.T) {
	var d SQLServer
	rv := reflect.ValueOf(d.newBase())
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Func || f.Kind() == reflect.Interface {
			if f.IsNil() {
				t.Errorf("newBase leaves %s unset", rv.Type().Field(i).Name)
			}
		}
	}
}
