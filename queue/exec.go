package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stageq/stageq/stages"
)

// KindExec is the kind of tasks whose body is an operating-system command. A
// worker runs them only for programs on its allow-list (WorkerConfig.AllowExec,
// `worker --allow-exec`); elsewhere the attempt fails without running anything.
//
// The body is a JSON array of arguments (["pg_dump", "-Fc", "sales"]) or words
// separated by spaces. No shell is involved, so no quoting, globbing or
// redirection: a body can never run more than the one program it names.
const KindExec = "exec"

// maxExecOutput is how much of a failed command's output reaches Logs.error.
const maxExecOutput = 4 << 10

// errExecNotAllowed fails a command task on a worker that may not run it.
var errExecNotAllowed = errors.New("not on this worker's --allow-exec list")

// execArgs splits an exec task's body into the program and its arguments.
func execArgs(body string) ([]string, error) {
	body = strings.TrimSpace(body)
	var args []string
	if strings.HasPrefix(body, "[") {
		if err := json.Unmarshal([]byte(body), &args); err != nil {
			return nil, fmt.Errorf("exec body: not a JSON array of strings: %w", err)
		}
	} else {
		args = strings.Fields(body)
	}
	if len(args) == 0 || args[0] == "" {
		return nil, errors.New("exec body names no program")
	}
	return args, nil
}

// ValidatePlan is p.Validate, and the bodies of its exec tasks checked as a
// worker will read them (execArgs): a body that names no program, or is not
// the JSON array it starts like, is refused when submitted rather than
// failed when run.
func ValidatePlan(p stages.Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	// Resolve gives each task its kind (the plan's default, else sql), stage by
	// stage in the plan's order; k follows it.
	resolved, k := p.Resolve().Tasks, 0
	for i, s := range p.Stages {
		for j := range s.Tasks {
			t := resolved[k]
			k++
			if t.Kind != KindExec {
				continue
			}
			if _, err := execArgs(t.Body); err != nil {
				return fmt.Errorf("%w: stages[%d].tasks[%d]: %v", stages.ErrInvalidPlan, i, j, err)
			}
		}
	}
	return nil
}

// allowed finds program and reports whether it may run: it must match an
// allow-list entry by name (resolved through PATH) or by absolute path. A
// program this worker cannot find is an error of its own, not a refusal.
func allowed(allow []string, program string) (string, bool, error) {
	path, err := exec.LookPath(program)
	if err != nil {
		return "", false, err
	}
	for _, a := range allow {
		if a == program && !strings.ContainsRune(a, filepath.Separator) {
			return path, true, nil
		}
		if filepath.IsAbs(a) {
			if abs, err := filepath.Abs(path); err == nil && abs == filepath.Clean(a) {
				return path, true, nil
			}
		}
	}
	return "", false, nil
}

// execWaitDelay is how long a cancelled command's process group has to exit
// after SIGTERM before it is killed, and how long a finished program's
// children may keep its output open before the worker stops reading it.
const execWaitDelay = 2 * time.Second

// executeCommand runs an exec task. Cancelling ctx stops the program and every
// process it started (inProcessGroup).
func (w *Worker) executeCommand(ctx context.Context, body string) error {
	args, err := execArgs(body)
	if err != nil {
		return NoRetry(err)
	}
	// A program this worker may not run, or cannot find, fails the attempt
	// only: workers of one queue may have different allow-lists and
	// programs, and the next attempt may be claimed by one that has it.
	path, ok, err := allowed(w.cfg.AllowExec, args[0])
	if err != nil {
		return fmt.Errorf("command %q: not found on this worker: %w", args[0], err)
	}
	if !ok {
		return fmt.Errorf("command %q: %w", args[0], errExecNotAllowed)
	}
	cmd := exec.CommandContext(ctx, path, args[1:]...)
	inProcessGroup(cmd)
	cmd.WaitDelay = execWaitDelay
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if ctx.Err() != nil {
		killGroup(cmd) // what ignored the SIGTERM
	}
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success() {
		// The program succeeded; a child it left running held its output.
		err = nil
	}
	if err != nil {
		text := out.String()
		if len(text) > maxExecOutput {
			text = "…" + text[len(text)-maxExecOutput:]
		}
		return fmt.Errorf("command %s: %w: %s", args[0], err, strings.TrimSpace(text))
	}
	return nil
}
