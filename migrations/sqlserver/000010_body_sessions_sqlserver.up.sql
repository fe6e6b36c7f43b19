-- Version 10: a killed worker's SQL bodies do not run on, on SQL Server (issue 10,
-- item 15), as version 4 did for PostgreSQL (migrations/postgres/000004_body_sessions.up.sql
-- has the design; this dialect's 000004 is a placeholder, kept as applied).
--
-- A body runs in a database session of its own (a pooled connection). When its
-- worker dies (SIGKILL, a crashed host, a cut network), SQL Server notices only
-- when it next writes to the client, so the body ran on while the rescued task
-- ran again elsewhere: twice at once, and a limit of 3 allowed 6 bodies. Now:
--
-- * Before a body starts, its worker calls stageq.BodySession on the connection
--   that then runs the body (dialect/sqlserver/body.go). In that session it
--   checks that the attempt still runs under its token, records @@SPID in the
--   attempt's Logs row (Logs.session) and tags the session with the attempt:
--   SET CONTEXT_INFO 'stageq' + the task id + the token (22 bytes).
-- * stageq.Rescue ends the body of an expired lease before it frees the task:
--   when the recorded session still exists, still carries the attempt's tag and
--   runs a request (sys.dm_exec_requests), it KILLs it and leaves the task
--   running, so it keeps its slot under every limit, until a later pass finds
--   the session gone.
--
-- Why CONTEXT_INFO and not sp_set_session_context: SESSION_CONTEXT returns a key
-- of the current session only ("Any user can read the session context for their
-- session"), and no catalog view shows it to another session; CONTEXT_INFO is
-- documented as stored in the context_info column of sys.dm_exec_sessions and
-- sys.dm_exec_requests, which the rescuing session reads. A session id is reused
-- after its connection ends; a new session does not carry the old attempt's tag,
-- so the rescue never kills a stranger that got the same id. A SET CONTEXT_INFO
-- issued in a procedure persists after the procedure returns.
-- https://learn.microsoft.com/sql/t-sql/functions/session-context-transact-sql
-- https://learn.microsoft.com/sql/relational-databases/system-stored-procedures/sp-set-session-context-transact-sql
-- https://learn.microsoft.com/sql/t-sql/statements/set-context-info-transact-sql
-- https://learn.microsoft.com/sql/t-sql/functions/context-info-transact-sql
-- https://learn.microsoft.com/sql/relational-databases/system-dynamic-management-views/sys-dm-exec-sessions-transact-sql
-- https://learn.microsoft.com/sql/relational-databases/system-dynamic-management-views/sys-dm-exec-requests-transact-sql
-- https://learn.microsoft.com/sql/t-sql/functions/spid-transact-sql
--
-- Permissions of the workers' login (docs/sqlserver.md):
-- * VIEW SERVER STATE (SQL Server 2019 and earlier) or VIEW SERVER PERFORMANCE
--   STATE (2022 and later) to see other sessions in sys.dm_exec_sessions and
--   sys.dm_exec_requests; without it a login sees only its own session, the
--   rescue finds no body to end and frees the task at once, as before version 10.
-- * ALTER ANY CONNECTION (sysadmin and processadmin have it; Azure SQL Database:
--   KILL DATABASE CONNECTION) to KILL; without it the KILL fails, the rescue
--   catches the error and leaves the task running until its body ends by itself.
--   KILL takes a literal session id, not a variable: the rescue builds the
--   statement from an int. A session cannot KILL itself.
-- https://learn.microsoft.com/sql/t-sql/language-elements/kill-transact-sql
--
-- stageq.Rescue below is version 9's definition copied whole with only this
-- change. Procedures are created through EXEC so that each compiles after the
-- ALTER TABLE of this same batch, as in versions 2, 7 and 9; quotes inside are
-- doubled. One transaction: a failure leaves version 9 as it was. Written from
-- Microsoft's documentation; NOT RUN AGAINST A REAL SQL SERVER (nor Babelfish):
-- see docs/sqlserver.md.

SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;

BEGIN TRANSACTION;

-- The body's session id (@@SPID, smallint in the DMVs), NULL until the worker
-- records it. A nullable column without a default: a metadata-only change.
ALTER TABLE stageq.Logs ADD [session] int NULL;

-- stageq.BodySession is the worker's first statement on a body's connection. It
-- leaves @Running = 0 when the attempt no longer runs under @Token (rescued or
-- finished meanwhile): the worker then does not start the body. Tasks is read
-- first and its shared lock released before Logs is updated, the order in which
-- stageq.Rescue locks them (Tasks, then Logs), so the two cannot deadlock; the
-- Logs row's outcome 'running' is the fence: a rescue that ended the attempt
-- first has set it to 'abandoned', and one that comes after finds the session.

-- stageq.Rescue (version 9): before it frees an expired lease, it KILLs the
-- attempt's body when that body still runs in the session Logs recorded.

COMMIT TRANSACTION;

-- Since version 13 the procedures this version created or altered are not in
-- its migration: the queue's logic is versioned apart from the tables, in
-- routines/sqlserver (see migrations/sqlserver/000013_routines_apart.up.sql).
