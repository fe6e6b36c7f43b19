-- Undo 000001: the procedures, then the tables (children before parents). Schema
-- stageq itself stays: golang-migrate keeps its version table in it.
SET XACT_ABORT ON;
BEGIN TRANSACTION;

DROP PROCEDURE IF EXISTS stageq.Rescue;
DROP PROCEDURE IF EXISTS stageq.Finish;
DROP PROCEDURE IF EXISTS stageq.Claim;
DROP PROCEDURE IF EXISTS stageq.Enqueue;
DROP PROCEDURE IF EXISTS stageq.Submit;
DROP PROCEDURE IF EXISTS stageq.OpenStage;
DROP PROCEDURE IF EXISTS stageq.RefreshProcess;

DROP TABLE IF EXISTS stageq.ExclusiveLeases;
DROP TABLE IF EXISTS stageq.ScheduleRuns;
DROP TABLE IF EXISTS stageq.Schedules;
DROP TABLE IF EXISTS stageq.Limits;
DROP TABLE IF EXISTS stageq.Workers;
DROP TABLE IF EXISTS stageq.Logs;
DROP TABLE IF EXISTS stageq.Tasks;
DROP TABLE IF EXISTS stageq.Processes;

COMMIT TRANSACTION;
