package sqlite

import (
	"strconv"

	"github.com/stageq/stageq/dialect"
)

// SQLite has no arrays, so the statements that end or extend a batch of
// attempts read them from JSON with json_each, as two flat arrays: the task ids,
// by which the planner seeks each task by its key, and the attempts as
// "id:token" texts, the fence, which the statement matches against
// id || ':' || lease_token. Flat, because json_each hands out a flat array's
// numbers and strings as they are, while an element that is itself an array
// or object is parsed again by every ->> or json_extract applied to it: in a
// draining worker that parsing took a tenth of SQLite's one writer's time
// (issue 9). And the fence is a list the statement builds once, not a
// subquery run again for every row: extendSQL's earlier correlated form read
// the whole list once per task the worker held.

// leasePairs encodes ls for the statements above: the ids' array, then the
// attempts' array.
func leasePairs(ls []dialect.TaskLease) (ids, attempts string) {
	idb := make([]byte, 0, 2+len(ls)*8)
	ab := make([]byte, 0, 2+len(ls)*28)
	idb, ab = append(idb, '['), append(ab, '[')
	for i, l := range ls {
		if i > 0 {
			idb, ab = append(idb, ','), append(ab, ',')
		}
		idb = strconv.AppendInt(idb, l.ID, 10)
		ab = append(ab, '"')
		ab = strconv.AppendInt(ab, l.ID, 10)
		ab = append(ab, ':')
		ab = strconv.AppendInt(ab, l.Token, 10)
		ab = append(ab, '"')
	}
	return string(append(idb, ']')), string(append(ab, ']'))
}
