package dialect

import (
	"slices"
	"testing"
)

// TestFinishInRounds: a batch that names a task three times goes in three
// rounds, none naming a task twice, in the batch's order; each entry's Held
// comes back at its own place and each process of Advance once.
func TestFinishInRounds(t *testing.T) {
	ps := []FinishParams{{TaskID: 1, Token: 1}, {TaskID: 2, Token: 1}, {TaskID: 1, Token: 2}, {TaskID: 1, Token: 3}, {TaskID: 3, Token: 1}}
	var rounds [][]int64 // the tokens of task 1 ... as each round saw them
	res, err := FinishInRounds(ps, func(part []FinishParams) (FinishResult, error) {
		var r FinishResult
		var seen []int64
		for _, fp := range part {
			if slices.Contains(seen, fp.TaskID) {
				t.Fatalf("a round named task %d twice: %+v", fp.TaskID, part)
			}
			seen = append(seen, fp.TaskID)
			r.Held = append(r.Held, fp.Token == 2 || fp.TaskID != 1) // task 1 is held by token 2 alone
			r.Advance = append(r.Advance, 7)
		}
		rounds = append(rounds, seen)
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]int64{{1, 2, 3}, {1}, {1}}; !slices.EqualFunc(rounds, want, slices.Equal) {
		t.Errorf("rounds named tasks %v; want %v", rounds, want)
	}
	if want := []bool{false, true, true, false, true}; !slices.Equal(res.Held, want) {
		t.Errorf("Held = %v; want %v", res.Held, want)
	}
	if !slices.Equal(res.Advance, []int64{7}) {
		t.Errorf("Advance = %v; want [7] once", res.Advance)
	}
	if NamesATaskTwice(ps[:2]) || !NamesATaskTwice(ps) {
		t.Error("NamesATaskTwice is wrong")
	}
}
