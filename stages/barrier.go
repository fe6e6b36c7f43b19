package stages

import (
	"fmt"
	"sort"
	"time"
)

// Run is one attempt as the Logs trail records it, for checking the barrier.
type Run struct {
	TaskID  int64
	Process string
	Order   int
	Start   time.Time
	End     *time.Time // nil while running
	// Final is true for the attempt that finished the task (it succeeded); a
	// failed or abandoned attempt does not finish it.
	Final bool
}

// Violation is a task that started while a lower-order task of its process was
// unfinished.
type Violation struct {
	Started Run
	Blocker Run
}

func (v Violation) String() string {
	return fmt.Sprintf("task %d (process %s, order %d) started at %s before task %d (order %d) finished",
		v.Started.TaskID, v.Started.Process, v.Started.Order, v.Started.Start.Format(time.RFC3339Nano),
		v.Blocker.TaskID, v.Blocker.Order)
}

// CheckOrder verifies the stage barrier over a history of attempts: no attempt
// started before every lower-order task of its process had finished. Each
// task's finish time is the end of its final attempt; a task that never finished
// blocks every later start of a higher order in its process.
func CheckOrder(runs []Run) []Violation {
	type key struct {
		process string
		task    int64
	}
	finish := map[key]Run{}
	for _, r := range runs {
		k := key{r.Process, r.TaskID}
		if _, ok := finish[k]; !ok {
			finish[k] = Run{TaskID: r.TaskID, Process: r.Process, Order: r.Order}
		}
		if r.Final {
			finish[k] = r
		}
	}
	byProcess := map[string][]Run{}
	for _, f := range finish {
		byProcess[f.Process] = append(byProcess[f.Process], f)
	}
	var out []Violation
	for _, r := range runs {
		for _, f := range byProcess[r.Process] {
			if f.Order >= r.Order {
				continue
			}
			if !f.Final || f.End == nil || f.End.After(r.Start) {
				out = append(out, Violation{Started: r, Blocker: f})
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Start.Before(out[j].Started.Start) })
	return out
}

// MaxOverlap is the largest number of runs that were in progress at one instant,
// among those the filter keeps.
func MaxOverlap(runs []Run, keep func(Run) bool) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		if keep != nil && !keep(r) {
			continue
		}
		end := time.Now().Add(24 * time.Hour)
		if r.End != nil {
			end = *r.End
		}
		edges = append(edges, edge{r.Start, +1}, edge{end, -1})
	}
	// Ends sort before starts at the same instant: a task that ends exactly when
	// another starts did not run beside it.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	cur, best := 0, 0
	for _, e := range edges {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}
