//go:build !stageq_no_postgres

package queue

// Every dialect registers its DSN schemes when imported, so a DSN alone picks
// the database. Each is linked unless the build leaves it out
// (go build -tags stageq_no_postgres), and its driver with it.
import _ "github.com/stageq/stageq/dialect/postgres" // postgres://, postgresql://
