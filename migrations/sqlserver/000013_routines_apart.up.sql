-- Version 13: the procedures leave the table schema (issue 12; the design is in
-- migrations/postgres/000013_routines_apart.up.sql). From now on they live in
-- routines/sqlserver and are installed by the routines package into a schema
-- per version (stageq_r1, …), recorded in stageq.Routines. stageq.SchemaFloor
-- holds the oldest binary schema version these tables still serve;
-- stageq.Workers.routines which version each worker calls. A database migrated
-- before version 13 keeps the procedures migrations 1 to 12 created in schema
-- stageq, for version-12 workers still running (those migrations now hold
-- table changes only);
-- stageq.Enqueue and stageq.Submit are altered by the install into forwards to
-- the newest routines. Written from Microsoft's documentation (CREATE TABLE,
-- ALTER TABLE ... ADD); NOT RUN AGAINST A REAL SQL SERVER: see docs/sqlserver.md.
-- https://learn.microsoft.com/sql/t-sql/statements/create-table-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/alter-table-transact-sql
SET XACT_ABORT ON;
BEGIN TRANSACTION;

CREATE TABLE stageq.Routines (
    version      int           NOT NULL CONSTRAINT CK_Routines_version CHECK (version >= 1),
    checksum     nvarchar(64)  NOT NULL,
    installed_at datetime2(7)  NOT NULL CONSTRAINT DF_Routines_installed_at DEFAULT (SYSUTCDATETIME()),
    CONSTRAINT PK_Routines PRIMARY KEY CLUSTERED (version)
);

CREATE TABLE stageq.SchemaFloor (
    id            int NOT NULL CONSTRAINT DF_SchemaFloor_id DEFAULT (1) CONSTRAINT CK_SchemaFloor_id CHECK (id = 1),
    oldest_binary int NOT NULL,
    CONSTRAINT PK_SchemaFloor PRIMARY KEY CLUSTERED (id)
);
INSERT INTO stageq.SchemaFloor (oldest_binary) VALUES (13);

ALTER TABLE stageq.Workers ADD routines int NULL;

COMMIT TRANSACTION;
