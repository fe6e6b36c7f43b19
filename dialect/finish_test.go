package dialect

import (
	"errors"
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

// TestFinishInRoundsAfterAFailure: when a round fails, the rounds before it
// stay recorded, and so does what the failed round says it committed (a
// dialect's chunks); the result marks those in Committed, with their Held
// and Advance, beside the error.
func TestFinishInRoundsAfterAFailure(t *testing.T) {
	ps := []FinishParams{{TaskID: 1, Token: 1}, {TaskID: 2, Token: 1}, {TaskID: 1, Token: 2}, {TaskID: 3, Token: 2}, {TaskID: 1, Token: 3}, {TaskID: 4, Token: 1}, {TaskID: 4, Token: 2}}
	boom := errors.New("connection lost")
	round := 0
	res, err := FinishInRounds(ps, func(part []FinishParams) (FinishResult, error) {
		round++
		r := FinishResult{Held: make([]bool, len(part))}
		for k := range part {
			r.Held[k] = true
		}
		switch round {
		case 1: // tasks 1, 2, 3 and 4
			r.Advance = []int64{7}
			return r, nil
		case 2: // task 1 again, and task 4: the first chunk committed, the next failed
			r.Committed = []bool{true, false}
			r.Advance = []int64{8}
			return r, boom
		}
		t.Fatalf("round %d ran after a failed one", round)
		return r, nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v; want the failed round's", err)
	}
	// Round 2 was ps[2] and ps[6]: Held says true for both, but only the first
	// committed, so the second's Held must not be taken.
	if want := []bool{true, true, true, true, false, true, false}; !slices.Equal(res.Committed, want) {
		t.Errorf("Committed = %v; want %v", res.Committed, want)
	}
	for i := range ps {
		if res.Recorded(i, err) != res.Committed[i] || res.Held[i] != res.Committed[i] {
			t.Errorf("entry %d: Recorded %v, Held %v; want both %v", i, res.Recorded(i, err), res.Held[i], res.Committed[i])
		}
	}
	if !slices.Equal(res.Advance, []int64{7, 8}) {
		t.Errorf("Advance = %v; want [7 8]", res.Advance)
	}

	// A failed round that committed nothing of its own.
	round = 0
	res, err = FinishInRounds(ps[:3], func(part []FinishParams) (FinishResult, error) {
		round++
		if round == 2 {
			return FinishResult{}, boom
		}
		return FinishResult{Held: []bool{true, false}}, nil
	})
	if err == nil || !slices.Equal(res.Committed, []bool{true, true, false}) || !slices.Equal(res.Held, []bool{true, false, false}) {
		t.Errorf("after a round that recorded nothing: %+v, %v; want Committed [true true false], Held [true false false]", res, err)
	}
	if !(FinishResult{}).Recorded(0, nil) || (FinishResult{}).Recorded(0, boom) {
		t.Error("Recorded: without an error every entry is recorded; with one and no Committed, none")
	}
}
