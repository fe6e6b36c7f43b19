// Package sqlserver embeds SQL Server's routines: the T-SQL procedures of the
// claim, the stage barrier, fairness, completion and rescue, installed into
// schema stageq_r<Version> by the routines package (dialect/sqlserver serves
// them through its Schema). Written from Microsoft's documentation; see
// docs/sqlserver.md for what has run where.
package sqlserver

import "embed"

// Version numbers these sources. Change a file, raise it: the checksum test
// (routines/routines_test.go) fails until both agree.
const Version = 3

// Files holds NN_Name.sql (one procedure each, one batch) and public/*.sql.
//
//go:embed *.sql public/*.sql
var Files embed.FS
