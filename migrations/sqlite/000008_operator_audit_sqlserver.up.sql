-- Version 8 gives SQL Server the operator audit and the 'cancelled' process state
-- (issue 10, items 3 and 4; migrations/sqlserver/000008_operator_audit_sqlserver.up.sql),
-- which this dialect has had since version 3: no change here; the file keeps the
-- three dialects' version numbers aligned.
SELECT 1;
