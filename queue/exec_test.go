package queue_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// runExecTasks enqueues exec bodies, runs one worker with the allow-list until
// idle, and returns the Logs.
func runExecTasks(t *testing.T, allow []string, bodies ...string) []dialect.LogEntry {
	t.Helper()
	ctx, c := openSQLite(t)
	for _, b := range bodies {
		if _, err := c.Enqueue(ctx, "", 1, stages.Task{Kind: queue.KindExec, Body: b}); err != nil {
			t.Fatal(err)
		}
	}
	return runUntilIdle(t, c, queue.WorkerConfig{AllowExec: allow}, nil)
}

// runUntilIdle runs one worker on c (cfg, with quick polling, retries and an
// exit once idle; setup registers handlers) until the queue is idle, and
// returns the Logs.
func runUntilIdle(t *testing.T, c *queue.Client, cfg queue.WorkerConfig, setup func(*queue.Worker)) []dialect.LogEntry {
	t.Helper()
	ctx := context.Background()
	cfg.ExitWhenIdle, cfg.PollMin = 300*time.Millisecond, 10*time.Millisecond
	cfg.RetryBase, cfg.RetryMax = time.Millisecond, time.Millisecond
	w, err := queue.NewWorker(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(w)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	logs, err := c.Logs(ctx, dialect.LogFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// TestExecIsOffWithoutAllowList: a worker without an allow-list does not claim
// exec tasks at all (they wait for a worker that runs them; no attempt spent).
func TestExecIsOffWithoutAllowList(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	logs := runExecTasks(t, nil, `["touch", "`+marker+`"]`)
	if len(logs) != 0 {
		t.Fatalf("logs = %+v, want none: a worker without --allow-exec claims no exec task", logs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although no program was allowed")
	}
}

func TestExecRunsAllowedProgramWithoutShell(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	logs := runExecTasks(t, []string{"touch"},
		"touch "+a+";rm "+a,        // no shell: ";rm" is part of an argument, not a command
		`["rm", "-rf", "`+dir+`"]`, // rm is not allowed
		`["false"]`,                // not allowed either
		"touch "+b)
	byBody := map[string]dialect.LogEntry{}
	for _, l := range logs {
		byBody[l.Body] = l
	}
	if _, err := os.Stat(a + ";rm"); err != nil {
		t.Errorf("touch with a ';' in its argument: %v (logs %+v)", err, logs)
	}
	if _, err := os.Stat(b); err != nil {
		t.Errorf("allowed touch did not run: %v", err)
	}
	if l := byBody[`["rm", "-rf", "`+dir+`"]`]; l.Outcome != dialect.OutcomeFailed || !strings.Contains(l.Error, `"rm"`) {
		t.Errorf("rm: %+v", l)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Error("the disallowed rm ran")
	}
}

// TestExecRefusalFailsTheAttemptOnly: a program this worker may not run, or
// cannot find, fails the attempt, not the task (another worker, with another
// allow-list or the program installed, may take the next), and the error
// tells the two apart.
func TestExecRefusalFailsTheAttemptOnly(t *testing.T) {
	missing := "stageq-no-such-program"
	logs := runExecTasks(t, []string{"touch", missing}, `["`+missing+`"]`, `["ls", "/"]`)
	attempts := map[string][]dialect.LogEntry{}
	for _, l := range logs {
		attempts[l.Body] = append(attempts[l.Body], l)
	}
	for body, want := range map[string]string{
		`["` + missing + `"]`: `command "` + missing + `": not found on this worker`,
		`["ls", "/"]`:         `command "ls": not on this worker's --allow-exec list`,
	} {
		got := attempts[body]
		if len(got) < 2 {
			t.Errorf("%s: %d attempts, want every attempt the task has (the first failure is not final)", body, len(got))
		}
		for _, l := range got {
			if l.Outcome != dialect.OutcomeFailed || !strings.Contains(l.Error, want) {
				t.Errorf("%s, attempt %d: %s %q; want failed, saying %q", body, l.Attempt, l.Outcome, l.Error, want)
			}
		}
	}
}

// TestExecBodiesAreCheckedWhenSubmitted: an exec body a worker could not read
// (a JSON array cut short, one of numbers, none of any program) is refused
// as an invalid plan when submitted, or added in a schedule's plan, and
// nothing is queued; it used to be queued and fail when a worker ran it.
// Words and whole arrays are taken.
func TestExecBodiesAreCheckedWhenSubmitted(t *testing.T) {
	ctx, c := openSQLite(t)
	for _, body := range []string{`["pg_dump", "-Fc"`, `[1, 2]`, `[]`, `[""]`} {
		if _, err := c.Enqueue(ctx, "", 1, stages.Task{Kind: queue.KindExec, Body: body}); !errors.Is(err, stages.ErrInvalidPlan) {
			t.Errorf("exec body %s: %v; want an invalid plan", body, err)
		}
	}
	plan := stages.Plan{Defaults: stages.TaskDefaults{Kind: queue.KindExec}, Stages: []stages.Stage{
		{Order: new(int), Tasks: []stages.Task{{Body: "pg_dump -Fc sales"}, {Body: `["true"]`}, {Kind: queue.KindSQL, Body: "[not exec"}}},
	}}
	if _, err := c.Submit(ctx, plan); err != nil {
		t.Fatalf("valid exec bodies (the default kind) beside a SQL one: %v", err)
	}
	plan.Stages[0].Tasks[1].Body = `["true"`
	if _, err := c.Submit(ctx, plan); !errors.Is(err, stages.ErrInvalidPlan) || !strings.Contains(err.Error(), "tasks[1]") {
		t.Errorf("a plan whose default kind is exec, with a broken body: %v; want an invalid plan naming tasks[1]", err)
	}
	if _, err := c.ScheduleAdd(ctx, queue.Schedule{Name: "dump", Every: stages.Duration(time.Hour), Plan: plan}); !errors.Is(err, queue.ErrInvalidSchedule) {
		t.Errorf("a schedule whose plan has a broken exec body: %v; want an invalid schedule", err)
	}
	tasks, err := c.Dialect().TaskList(ctx, dialect.TaskFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 3 {
		t.Errorf("%d tasks queued, want the 3 of the valid plan", len(tasks))
	}
}
