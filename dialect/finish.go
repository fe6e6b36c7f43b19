package dialect

// A batch of ends may name one task twice: a worker whose lease on a task was
// rescued, and which then claimed that task again, can end the stale attempt
// and the new one in the same batch. A batch statement that answers "held" by
// task id would then report both held, though only the current token changed
// anything. Such a batch goes in rounds that name each task once.

// NamesATaskTwice reports whether ps names some task more than once.
func NamesATaskTwice(ps []FinishParams) bool {
	seen := make(map[int64]bool, len(ps))
	for _, fp := range ps {
		if seen[fp.TaskID] {
			return true
		}
		seen[fp.TaskID] = true
	}
	return false
}

// FinishInRounds calls finish, a dialect's batch of ends, once per round of
// ps in which no task appears twice (one round when NamesATaskTwice is false),
// in order, and gathers each round's Held in ps's order and every process of
// their Advance once. Each round is taken to commit on its own: when one
// fails, the result marks the entries of the rounds before it (and what the
// failed round reports committed of its own) in Committed, beside the error.
func FinishInRounds(ps []FinishParams, finish func([]FinishParams) (FinishResult, error)) (FinishResult, error) {
	if !NamesATaskTwice(ps) {
		return finish(ps)
	}
	out := FinishResult{Held: make([]bool, len(ps))}
	advance := map[int64]bool{}
	committed := make([]bool, len(ps)) // by the rounds so far, for an error
	left := make([]int, len(ps))       // indexes into ps not ended yet
	for i := range left {
		left[i] = i
	}
	for len(left) > 0 {
		seen := map[int64]bool{}
		var round, later []int
		for _, i := range left {
			if seen[ps[i].TaskID] {
				later = append(later, i)
				continue
			}
			seen[ps[i].TaskID] = true
			round = append(round, i)
		}
		batch := make([]FinishParams, len(round))
		for k, i := range round {
			batch[k] = ps[i]
		}
		res, err := finish(batch)
		for k, i := range round {
			if res.Recorded(k, err) {
				committed[i] = true
				out.Held[i] = k < len(res.Held) && res.Held[k]
			}
		}
		for _, p := range res.Advance {
			if !advance[p] {
				advance[p] = true
				out.Advance = append(out.Advance, p)
			}
		}
		if err != nil {
			out.Committed = committed
			return out, err
		}
		left = later
	}
	return out, nil
}
