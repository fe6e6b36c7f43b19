//go:build !stageq_no_sqlite

package queue

// Every dialect registers its DSN schemes when imported, so a DSN alone picks
// the database. Each is linked unless the build leaves it out
// (go build -tags stageq_no_sqlite), and its driver with it.
import _ "github.com/stageq/stageq/dialect/sqlite" // sqlite://
