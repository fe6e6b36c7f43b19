package dialect

import "strconv"

// BodyMark is the comment a SQL body's text starts with on PostgreSQL: its
// attempt's tag (task and lease token, which no other attempt shares), by
// which the rescue finds a dead worker's body in pg_stat_activity.query while
// it runs. routines/postgres/60_rescue.sql (body_tag, body_backend) writes and
// matches the same text. The newline ends the comment's line, so a body that
// starts with a `--` comment or a psql-style first line stays what it was.
func BodyMark(a TaskLease) string {
	return "/* stageq task " + strconv.FormatInt(a.ID, 10) + " lease " + strconv.FormatInt(a.Token, 10) + " */\n"
}

// BodyMarkPattern is a regular expression for a BodyMark at the start of a
// statement, its closing newline left out (a log may show it as a space).
const BodyMarkPattern = `^/\* stageq task -?\d+ lease -?\d+ \*/`
