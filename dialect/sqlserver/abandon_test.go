package sqlserver

import (
	"regexp"
	"strings"
	"testing"
)

// newestProcedures maps each procedure (lower case, without the schema) to the
// body the routines define.
func newestProcedures(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range routineProcs(t) {
		if p.file == "Enqueue.sql" || p.file == "Submit.sql" {
			continue // public/: the entry points forward to the routines
		}
		out[strings.ToLower(strings.TrimPrefix(p.name, "stageq."))] = codeOnlyKeepStrings(t, p.file+": "+p.name, p.body)
	}
	return out
}

// codeOnlyKeepStrings is the text without comments, string literals kept.
func codeOnlyKeepStrings(t *testing.T, name, s string) string {
	t.Helper()
	return withoutComments(t, name, s, func(content string) string {
		return "'" + strings.ReplaceAll(content, "'", "''") + "'"
	})
}

// TestAbandonBudget: the newest procedures carry the abandon budget (issue 10,
// item 14; migration 9) as TaskClaim, TaskFinishMany and the operator's retry
// expect it. It reads the T-SQL; it does not run it.
func TestAbandonBudget(t *testing.T) {
	procs := newestProcedures(t)
	has := func(proc, re string) {
		t.Helper()
		if !regexp.MustCompile(`(?is)` + re).MatchString(procs[proc]) {
			t.Errorf("stageq.%s (newest definition): no match for %s", proc, re)
		}
	}
	// The claim returns abandons last, where TaskClaim scans it.
	has("claim", `\bSELECT\s+c\.id,.*c\.atomic,\s*c\.abandons\s+FROM\s+@Claimed\b`)
	if n := len(regexp.MustCompile(`inserted\.abandons\b`).FindAllString(procs["claim"], -1)); n != 2 {
		t.Errorf("stageq.Claim: %d OUTPUT inserted.abandons, want 2 (fast and gated paths)", n)
	}
	// FinishMany and Finish take the outcome abandoned.
	has("finishmany", `NOT IN \('succeeded', 'failed', 'released', 'abandoned'\)`)
	has("finish", `NOT IN \('succeeded', 'failed', 'released', 'abandoned'\)`)
	has("finishmany", `abandons\s*=\s*CASE WHEN r\.outcome = 'abandoned' THEN t\.abandons \+ 1 ELSE t\.abandons END`)
	has("finishmany", `attempt\s*=\s*CASE WHEN r\.outcome = 'released' THEN t\.attempt - 1 ELSE t\.attempt END`)
	has("finishmany", `not counted against max_attempts`)
	// An expired lease is charged to the abandon budget, not to max_attempts.
	has("rescue", `abandons\s*=\s*abandons \+ 1`)
	has("rescue", `not counted against max_attempts`)
	if strings.Contains(strings.ToLower(procs["rescue"]), "max_attempts\n") ||
		regexp.MustCompile(`(?i)\bt\.max_attempts\b|@MaxAttempts\b`).MatchString(procs["rescue"]) {
		t.Error("stageq.Rescue still judges an expired lease against max_attempts")
	}
	for _, proc := range []string{"finishmany", "rescue"} {
		has(proc, `@MaxAbandons\s+int\s*=\s*10\b`)
	}
	// An operator's retry gives a fresh abandon budget with fresh attempts.
	for name, sql := range map[string]string{"retry process": retryProcessSQL, "retry task": retryTaskSQL} {
		if !strings.Contains(sql, "attempt = 0, abandons = 0") {
			t.Errorf("%s: a retry does not reset abandons", name)
		}
	}
}
