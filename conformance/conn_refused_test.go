package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/dialect"
)

// TestRefusedBodyConnectionChargesNothing (PostgreSQL): the server refuses
// every new connection of the worker's role (CONNECTION LIMIT 0: "too many
// connections for role", SQLSTATE 53300, as a database out of connection
// slots answers) while the worker keeps the connections it has. Its bodies,
// whose pool has no connection yet, cannot start: each task is handed back
// uncounted (Logs: released), and the worker holds its claims back meanwhile
// instead of handing the same task back again and again. Once connections
// are let in again, every task runs once and succeeds, although each allows
// only one attempt. Before, the first refusal failed the task for good.
func TestRefusedBodyConnectionChargesNothing(t *testing.T) {
	db := newTestDB(t, newPostgresDB(t))
	admin := adminPool(t, db)

	// A role of the worker's own, not a superuser (the server holds no
	// superuser to a connection limit), acting as the owner of the queue's
	// tables through membership in their owner.
	role := fmt.Sprintf("stageq_refused_%08x", rand.Uint32())
	db.exec(t, "CREATE ROLE "+role+" LOGIN IN ROLE "+currentUser(t, db))
	t.Cleanup(func() {
		// Its connections first: a role that still has some cannot be dropped.
		admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		time.Sleep(200 * time.Millisecond)
		if _, err := admin.Exec("DROP ROLE IF EXISTS " + role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	as := *db
	as.DSN = u.String()

	w := spawnWorker(t, &as, "--id", "refused-w", "--concurrency", "2", "--poll-max", "100ms", "--heartbeat", "300ms", "--lease", "3s")
	waitFor(t, 30*time.Second, "the worker to register", func() bool {
		return db.count(t, "SELECT count(*) FROM stageq.workers WHERE id = 'refused-w' AND stopped_at IS NULL") == 1
	})
	db.exec(t, "ALTER ROLE "+role+" CONNECTION LIMIT 0")

	const n = 4
	p := plan("refused", "", []int{1}, sameBody("SELECT 1"), n)
	p.Defaults.MaxAttempts = 1
	db.submit(t, p)
	released := func() int {
		return db.count(t, `SELECT count(*) FROM stageq.logs WHERE outcome = 'released' AND error LIKE '%no database connection could be opened%'`)
	}
	waitFor(t, 30*time.Second, "a task handed back for want of a connection", func() bool { return released() > 0 })
	// Over two seconds of refusals, the pause between claims (0.5 s, then
	// doubling) lets the worker hand a task back a few times, not at every
	// poll (100 ms).
	time.Sleep(2 * time.Second)
	during := released()
	if during > 8 {
		t.Errorf("%d hand-backs in about 2 s of refused connections: the worker did not hold its claims back", during)
	}
	if f := db.count(t, "SELECT count(*) FROM stageq.logs WHERE outcome IN ('failed', 'abandoned')"); f != 0 {
		t.Fatalf("%d attempts failed or abandoned while connections were refused; want every task handed back uncounted", f)
	}

	db.exec(t, "ALTER ROLE "+role+" CONNECTION LIMIT -1")
	waitFor(t, 60*time.Second, "every task to succeed once connections are let in", func() bool {
		return db.count(t, "SELECT count(*) FROM stageq.logs WHERE outcome = 'succeeded'") == n
	})
	entries := db.logs(t, dialect.LogFilter{Process: "refused"})
	checkNoneCharged(t, db, "refused", entries, n)
	if !strings.Contains(w.output(), "no database connection for the body") {
		t.Errorf("the worker's log does not say why it handed tasks back")
	}
	t.Logf("%d tasks handed back %d times while refused", n, during)
}

// currentUser is the role the test's own connections log in as.
func currentUser(t *testing.T, db *testDB) string {
	t.Helper()
	var name string
	if err := db.D.DB().QueryRowContext(context.Background(), "SELECT current_user").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}
