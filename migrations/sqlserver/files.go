// Package sqlserver embeds the sqlserver dialect's migrations (dialect/sqlserver serves them
// through its Schema). The files are numbered alike in every dialect: a
// version that changes nothing here still has a file that says so.
package sqlserver

import "embed"

// Files holds 000001_core.up.sql and every later version, up and down.
//
//go:embed *.sql
var Files embed.FS
