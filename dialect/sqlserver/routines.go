package sqlserver

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/stageq/stageq/dialect"
	rsrc "github.com/stageq/stageq/routines/sqlserver"
)

// Routines are the T-SQL procedures in routines/sqlserver, version
// rsrc.Version, installed into schema stageq_r<version> (package routines).
func Routines() dialect.Routines {
	return dialect.Routines{Version: rsrc.Version, Files: rsrc.Files, SQL: routineSQL}
}

// routineSQL installs a version in one transaction (CREATE SCHEMA and CREATE
// PROCEDURE may run inside one; each file is a batch of its own, as CREATE
// PROCEDURE must begin its batch). The install lock is an application lock
// owned by the transaction. A procedure keeps the ANSI_NULLS and
// QUOTED_IDENTIFIER settings it was created under, and the filtered indexes
// its statements use need both ON: Prepare sets them for the session.
// CREATE SCHEMA must also be alone in its batch: it runs through EXEC.
// Written from Microsoft's documentation (sp_getapplock, CREATE SCHEMA, DROP
// PROCEDURE, DROP SCHEMA, sys.objects); NOT RUN AGAINST A REAL SQL SERVER.
// https://learn.microsoft.com/sql/relational-databases/system-stored-procedures/sp-getapplock-transact-sql
// https://learn.microsoft.com/sql/t-sql/statements/create-procedure-transact-sql
// https://learn.microsoft.com/sql/t-sql/statements/drop-schema-transact-sql
var routineSQL = dialect.RoutineSQL{
	Lock:            routinesLockSQL,
	LockShared:      routinesLockSharedSQL,
	Prepare:         []string{`SET ANSI_NULLS ON; SET QUOTED_IDENTIFIER ON;`},
	CreateNamespace: createNamespace,
	DropNamespace:   dropNamespace,
	List:            routinesListSQL,
	Record:          routinesRecordSQL,
	Forget:          routinesForgetSQL,
	InUse:           routinesInUseSQL,
	Arg:             func(name string, v any) any { return sql.Named(name, v) },
}

const (
	routinesLockSQL = `
DECLARE @Lock int;
EXEC @Lock = sys.sp_getapplock @Resource = N'stageq: routines', @LockMode = N'Exclusive',
     @LockOwner = N'Transaction', @LockTimeout = 60000;
IF @Lock < 0
    THROW 50091, N'stageq: could not take the routines lock within 60 s', 1;`
	// routinesLockSharedSQL is routinesLockSQL in shared mode (a lock mode of
	// sp_getapplock, per Microsoft's documentation; not run here).
	routinesLockSharedSQL = `
DECLARE @Lock int;
EXEC @Lock = sys.sp_getapplock @Resource = N'stageq: routines', @LockMode = N'Shared',
     @LockOwner = N'Transaction', @LockTimeout = 60000;
IF @Lock < 0
    THROW 50092, N'stageq: could not take the routines lock (shared) within 60 s', 1;`
	routinesListSQL   = `SELECT version, checksum, installed_at FROM stageq.Routines ORDER BY version DESC`
	routinesRecordSQL = `
DECLARE @Version int = @pVersion, @Checksum nvarchar(64) = @pChecksum;
INSERT INTO stageq.Routines (version, checksum) VALUES (@Version, @Checksum);`
	routinesForgetSQL = `
DECLARE @Version int = @pVersion;
DELETE FROM stageq.Routines WHERE version = @Version;`
	routinesInUseSQL = `
DECLARE @LiveMs bigint = @pLiveMs;
SELECT routines, COUNT(*) FROM stageq.Workers
 WHERE routines IS NOT NULL AND stopped_at IS NULL
   AND heartbeat_at >= DATEADD(millisecond, -CAST(CASE WHEN @LiveMs > 2000000000 THEN 2000000000 ELSE @LiveMs END AS int), SYSUTCDATETIME())
 GROUP BY routines;`
	// routinesCreateSchemaSQL: CREATE SCHEMA must be alone in its batch, so
	// it runs through sp_executesql, the name quoted by QUOTENAME.
	//
	// The new schema gets schema stageq's owner, so that ownership chaining
	// from its procedures to stageq's tables holds as it did when both were
	// one schema, and schema stageq's EXECUTE grants, so that a role allowed
	// to run the routines before the upgrade still may (from the documents
	// below; not run on a SQL Server).
	// https://learn.microsoft.com/sql/t-sql/statements/create-schema-transact-sql
	// https://learn.microsoft.com/sql/t-sql/statements/grant-schema-permissions-transact-sql
	routinesCreateSchemaSQL = `
SET XACT_ABORT ON;
DECLARE @Schema nvarchar(128) = @pSchema;
DECLARE @Owner sysname = (SELECT USER_NAME(s.principal_id) FROM sys.schemas AS s WHERE s.name = N'stageq');
DECLARE @Sql nvarchar(max) = N'CREATE SCHEMA ' + QUOTENAME(@Schema) + N' AUTHORIZATION ' + QUOTENAME(@Owner);
EXEC sys.sp_executesql @Sql;
DECLARE @Grants TABLE (n int IDENTITY(1, 1) PRIMARY KEY, grantee sysname NOT NULL);
INSERT INTO @Grants (grantee)
SELECT USER_NAME(p.grantee_principal_id)
  FROM sys.database_permissions AS p
 WHERE p.class = 3 AND p.major_id = SCHEMA_ID(N'stageq')
   AND p.permission_name = N'EXECUTE' AND p.state IN ('G', 'W');
DECLARE @I int = 1, @Count int = (SELECT COUNT(*) FROM @Grants);
WHILE @I <= @Count
BEGIN
    SELECT @Sql = N'GRANT EXECUTE ON SCHEMA::' + QUOTENAME(@Schema) + N' TO ' + QUOTENAME(g.grantee)
      FROM @Grants AS g WHERE g.n = @I;
    EXEC sys.sp_executesql @Sql;
    SET @I += 1;
END;`
	// routinesDropSchemaSQL drops every procedure, function and view in the
	// schema, then the schema (DROP SCHEMA fails on one that is not empty);
	// nothing when the schema does not exist.
	// XACT_ABORT makes a DROP that fails end the batch (per the SET
	// XACT_ABORT documentation; not run); without it the loop would pick the
	// same object again for ever.
	routinesDropSchemaSQL = `
SET XACT_ABORT ON;
DECLARE @Schema nvarchar(128) = @pSchema;
DECLARE @Sql nvarchar(max);
WHILE 1 = 1
BEGIN
    SET @Sql = NULL;
    SELECT TOP (1) @Sql = N'DROP '
           + CASE WHEN o.type IN ('FN', 'IF', 'TF', 'FS', 'FT') THEN N'FUNCTION '
                  WHEN o.type = 'V' THEN N'VIEW ' ELSE N'PROCEDURE ' END
           + QUOTENAME(@Schema) + N'.' + QUOTENAME(o.name)
      FROM sys.objects AS o
     WHERE o.schema_id = SCHEMA_ID(@Schema) AND o.type IN ('P', 'PC', 'FN', 'IF', 'TF', 'FS', 'FT', 'V');
    IF @Sql IS NULL BREAK;
    EXEC sys.sp_executesql @Sql;
END;
IF SCHEMA_ID(@Schema) IS NOT NULL
BEGIN
    SET @Sql = N'DROP SCHEMA ' + QUOTENAME(@Schema);
    EXEC sys.sp_executesql @Sql;
END;`
)

func createNamespace(ctx context.Context, tx *sql.Tx, ns string) error {
	if _, err := tx.ExecContext(ctx, routinesCreateSchemaSQL, nvarchar("pSchema", ns)); err != nil {
		return fmt.Errorf("create schema %s: %w", ns, err)
	}
	return nil
}

func dropNamespace(ctx context.Context, tx *sql.Tx, ns string) error {
	if _, err := tx.ExecContext(ctx, routinesDropSchemaSQL, nvarchar("pSchema", ns)); err != nil {
		return fmt.Errorf("drop schema %s: %w", ns, err)
	}
	return nil
}

// UseRelease implements dialect.ReleaseUser.
func (d *SQLServer) UseRelease(rel dialect.Release) {
	d.migrations = rel.MigrationsOr(d.migrations)
	d.calls = newCalls(rel.RoutinesOr(d.calls.Routines()))
}

// newCalls renders the statements that call a routine for r's version.
func newCalls(r dialect.Routines) *dialect.RoutineCalls {
	return dialect.NewRoutineCalls(r, advanceSQL, bodySessionSQL, claimSQL, configureSQL, finishManySQL, finishSQL,
		openStageSQL, rescueSQL, submitSQL)
}
