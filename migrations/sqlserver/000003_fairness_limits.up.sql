-- Placeholder: on SQL Server, 000001_core.up.sql already creates everything that
-- version 000003 adds on PostgreSQL and SQLite (the SQL Server dialect shipped
-- after it). The file keeps the three dialects' version numbers aligned, as River
-- does (shared/STYLE.md); golang-migrate needs a statement, so it runs one that
-- changes nothing.
SET NOCOUNT ON;
