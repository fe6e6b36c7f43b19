package sqlserver

import (
	"database/sql"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// baseArgs are the arguments sqlbase passes each statement SQL Server gives it,
// in sqlbase's documented order ("In:" of sqlbase.Statements and
// LeaseStatements), with the Go types it passes them as.
var baseArgs = map[string][]struct {
	param string
	value any
}{
	"log list": {{"pProcess", ""}, {"pTaskId", int64(0)}, {"pWorkerId", ""}, {"pOutcome", ""},
		{"pSince", time.Time{}}, {"pLimit", 0}},
	"task list":     {{"pProcess", ""}, {"pState", ""}, {"pLimit", 0}},
	"process get":   {{"pName", ""}},
	"process list":  {{"pName", ""}, {"pAll", false}},
	"stage count":   {{"pName", ""}, {"pAll", false}},
	"stage done":    {{"pName", ""}, {"pAll", false}},
	"worker list":   {},
	"lease acquire": {{"pName", ""}, {"pHolder", ""}, {"pTtlMs", int64(0)}},
	"lease get":     {{"pName", ""}},
	"lease extend":  {{"pName", ""}, {"pHolder", ""}, {"pToken", int64(0)}, {"pTtlMs", int64(0)}},
	"lease release": {{"pName", ""}, {"pHolder", ""}, {"pToken", int64(0)}},
	"lease list":    {{"pName", ""}, {"pHeldOnly", false}},
}

// declaredFor is the local type (declRe's first group, lower case) each Go
// type bound declares may be copied into.
var declaredFor = map[string]*regexp.Regexp{
	"string":    regexp.MustCompile(`^n?varchar\(`),
	"int":       regexp.MustCompile(`^int$`),
	"int64":     regexp.MustCompile(`^bigint$`),
	"bool":      regexp.MustCompile(`^bit$`),
	"time.Time": regexp.MustCompile(`^datetime2\(`),
}

// TestBaseStatementsBind pins the contract between sqlbase and the statements
// SQL Server gives it: each one's parameters, in the order they appear, are
// the arguments sqlbase passes in that order, each copied into a local of the
// type its Go value is declared as; and bound names them so.
func TestBaseStatementsBind(t *testing.T) {
	var d SQLServer
	b := d.newBase()
	given := map[string]string{
		b.SQL.LogList: "log list", b.SQL.TaskList: "task list", b.SQL.ProcessGet: "process get",
		b.SQL.ProcessList: "process list", b.SQL.StageCount: "stage count", b.SQL.StageDone: "stage done",
		b.SQL.WorkerList: "worker list",
		b.Lease.Acquire:  "lease acquire", b.Lease.Get: "lease get", b.Lease.Extend: "lease extend",
		b.Lease.Release: "lease release", b.Lease.List: "lease list",
	}
	if len(given) != len(baseArgs) {
		t.Fatalf("newBase gives %d distinct statements, baseArgs lists %d", len(given), len(baseArgs))
	}
	for _, st := range statements {
		name, ok := given[st.sql]
		if !ok {
			continue
		}
		if name != st.name {
			t.Errorf("newBase gives statement %q where %q is expected", st.name, name)
			continue
		}
		delete(given, st.sql)
		want := baseArgs[name]
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
			if re := declaredFor[goType]; re == nil || !re.MatchString(typ) {
				t.Errorf("%s: @%s is copied into a %s local, sqlbase passes a %s", name, a.param, typ, goType)
			}
		}
	}
	for _, name := range given {
		t.Errorf("statement %q given to sqlbase is not registered", name)
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
	}
	return "?"
}

// TestBindArgsRefusesAMismatch: too few or too many arguments, or one of a
// type without a fixed declaration, is an error before anything is sent.
func TestBindArgsRefusesAMismatch(t *testing.T) {
	for _, args := range [][]any{{}, {"a", "b"}, {1.5}} {
		if _, err := bindArgs(processGetSQL, args); err == nil {
			t.Errorf("bindArgs(processGetSQL, %v): no error", args)
		}
	}
}
