// Package postgres embeds PostgreSQL's routines: the PL/pgSQL and SQL functions
// of the claim, the stage barrier, fairness, completion and rescue, installed
// into schema stageq_r<Version> by the routines package (dialect/postgres
// serves them through its Schema).
package postgres

import "embed"

// Version numbers these sources. Change a file, raise it: the checksum test
// (routines/routines_test.go) fails until both agree.
const Version = 11

// Files holds NN_job.sql and public/*.sql.
//
//go:embed *.sql public/*.sql
var Files embed.FS
