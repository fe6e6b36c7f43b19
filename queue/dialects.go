package queue

// Every dialect registers its DSN schemes when imported, so a DSN alone picks
// the database.
import (
	_ "github.com/stageq/stageq/dialect/postgres"  // postgres://, postgresql://
	_ "github.com/stageq/stageq/dialect/sqlite"    // sqlite://
	_ "github.com/stageq/stageq/dialect/sqlserver" // sqlserver://
)
