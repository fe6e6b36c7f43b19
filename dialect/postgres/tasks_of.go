package postgres

// tasksOf is every task of one process, as a subquery: process is the SQL
// expression of its id (a column of the outer query, or a parameter). No index
// holds all of a process's tasks since schema version 14: tasks_waiting leaves
// the running ones to tasks_running, so that a claim writes no entry there
// (migrations/postgres/000014_stage_index_waiting.up.sql). The two parts are
// read apart; a condition on the outer query's t reaches both.
func tasksOf(process string) string {
	return `(SELECT * FROM stageq.tasks w WHERE w.process_id = ` + process + ` AND w.state <> 'running'
        UNION ALL
        SELECT * FROM stageq.tasks r WHERE r.process_id = ` + process + ` AND r.state = 'running')`
}
