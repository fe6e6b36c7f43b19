package sqlserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/msdsn"

	"github.com/stageq/stageq/dialect"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want errorClass
	}{
		{mssql.Error{Number: 1205, Message: "deadlock victim"}, classRolledBack},
		{fmt.Errorf("claim: %w", mssql.Error{Number: 1222}), classRolledBack},
		{mssql.Error{Number: 40613}, classRolledBack},
		{mssql.Error{Number: 40501}, classRolledBack},
		{mssql.Error{Number: 40197}, classBroken},
		{mssql.Error{Number: 10054}, classBroken},
		{io.EOF, classBroken},
		{mssql.Error{Number: 50003, Message: "stageq: task 1 is invalid"}, classFinal},
		{mssql.Error{Number: 208, Message: "Invalid object name"}, classFinal},
		{errors.New("other"), classFinal},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestMapErr(t *testing.T) {
	for _, n := range []int32{50001, 50003, 50010, 547, 515, 2628, 8152} {
		err := mapErr(mssql.Error{Number: n, Message: "stageq: task 2 is invalid: body must not be empty"})
		if !errors.Is(err, dialect.ErrInvalid) {
			t.Errorf("error %d: %v is not ErrInvalid", n, err)
		}
		if strings.Contains(err.Error(), "stageq: task") {
			t.Errorf("error %d: the stageq: prefix stays: %v", n, err)
		}
	}
	if err := mapErr(mssql.Error{Number: 1205}); errors.Is(err, dialect.ErrInvalid) {
		t.Errorf("a deadlock mapped to ErrInvalid: %v", err)
	}
	if !isUniqueViolation(fmt.Errorf("x: %w", mssql.Error{Number: 2627})) || isUniqueViolation(mssql.Error{Number: 547}) {
		t.Error("isUniqueViolation")
	}
	if !IsRetryable(mssql.Error{Number: 1205}) || IsRetryable(mssql.Error{Number: 10054}) {
		t.Error("IsRetryable: only errors after which the server rolled back")
	}
}

func TestRetry(t *testing.T) {
	d := &SQLServer{}
	ctx := context.Background()

	calls := 0
	err := d.retry(ctx, retrySafe, func(context.Context) error {
		calls++
		if calls < 3 {
			return mssql.Error{Number: 1205}
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("deadlock twice then success: err %v after %d calls", err, calls)
	}

	calls = 0
	err = d.retry(ctx, retrySafe, func(context.Context) error { calls++; return io.EOF })
	if err == nil || calls != 1 {
		t.Errorf("retrySafe retried a broken connection (%d calls)", calls)
	}

	calls = 0
	err = d.retry(ctx, retryAll, func(context.Context) error { calls++; return mssql.Error{Number: 50003} })
	if err == nil || calls != 1 {
		t.Errorf("a validation error was retried (%d calls)", calls)
	}

	calls = 0
	err = d.retry(ctx, retryAll, func(context.Context) error { calls++; return mssql.Error{Number: 1205} })
	if err == nil || calls != retryAttempts {
		t.Errorf("a deadlock every time: %d calls, want %d, err %v", calls, retryAttempts, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	err = d.retry(cctx, retryAll, func(context.Context) error { calls++; return mssql.Error{Number: 40613} })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("a cancelled context: %d calls, err %v", calls, err)
	}
}

func TestRedaction(t *testing.T) {
	for _, dsn := range []string{
		"sqlserver://sa:s3cret-pw@db:1433?database=stageq",
		"sqlserver://sa:s3cret-pw@db:badport?database=stageq",
		"sqlserver://db:1433?database=stageq&password=s3cret-pw",
	} {
		if r := redactDSN(dsn); strings.Contains(r, "s3cret-pw") {
			t.Errorf("redactDSN(%q) = %q", dsn, r)
		}
		msg := scrub(`parse "`+dsn+`": invalid port`, dsn)
		if strings.Contains(msg, "s3cret-pw") {
			t.Errorf("scrub kept the password: %q", msg)
		}
	}
	_, err := Open(context.Background(), "sqlserver://sa:s3cret-pw@db:badport?database=stageq")
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("Open with a bad port: %v", err)
	}
}

// TestWhereNamesTheDatabase: the user, server, instance, port and database
// of a DSN, in either of go-mssqldb's forms, without its password.
func TestWhereNamesTheDatabase(t *testing.T) {
	for dsn, want := range map[string]string{
		"sqlserver://sa:s3cret-pw@db:1433?database=stageq":        "sqlserver sa@db:1433/stageq",
		"sqlserver://app:s3cret-pw@db/SQLEXPRESS?database=queue":  `sqlserver app@db\SQLEXPRESS/queue`,
		"server=db;user id=app;password=s3cret-pw;database=queue": "sqlserver app@db/queue",
	} {
		cfg, err := msdsn.Parse(dsn)
		if err != nil {
			t.Fatalf("%s: %v", dsn, err)
		}
		if got := where(cfg); got != want {
			t.Errorf("where(%s) = %q, want %q", redactDSN(dsn), got, want)
		}
	}
}

func TestChecks(t *testing.T) {
	if err := checkLen("worker id", strings.Repeat("é", 200), maxName); err != nil {
		t.Errorf("200 characters refused: %v", err)
	}
	if err := checkLen("worker id", strings.Repeat("x", 201), maxName); !errors.Is(err, dialect.ErrInvalid) {
		t.Errorf("201 characters: %v", err)
	}
	// A character outside the BMP takes two UTF-16 code units in nvarchar.
	if err := checkLen("worker id", strings.Repeat("😀", 101), maxName); !errors.Is(err, dialect.ErrInvalid) {
		t.Errorf("101 emoji (202 code units): %v", err)
	}
	if clampInt32(1<<40) != 1<<31-1 || clampInt32(-1<<40) != -1<<31 || clampInt32(7) != 7 {
		t.Error("clampInt32")
	}
}

// TestEveryErrorOfAResponseCounts: go-mssqldb reports the last error of a
// response and keeps all of them in Error.All; a deadlock followed by a
// transaction-count error (1205 then 266) is still a rollback, and a THROW
// followed by 266 is still bad input.
func TestEveryErrorOfAResponseCounts(t *testing.T) {
	withAll := func(nums ...int32) error {
		all := make([]mssql.Error, len(nums))
		for i, n := range nums {
			all[i] = mssql.Error{Number: n, Message: fmt.Sprintf("error %d", n)}
		}
		last := all[len(all)-1]
		last.All = all
		return fmt.Errorf("finish: %w", last)
	}
	if got := classify(withAll(1205, 266)); got != classRolledBack {
		t.Errorf("1205 then 266: class %d, want rolled back", got)
	}
	if !IsRetryable(withAll(1205, 266)) || !isLockError(withAll(1205, 266)) {
		t.Error("1205 then 266 is not retryable as a lock error")
	}
	if got := classify(withAll(10054, 266)); got != classBroken {
		t.Errorf("10054 then 266: class %d, want broken", got)
	}
	if got := classify(withAll(208, 266)); got != classFinal {
		t.Errorf("208 then 266: class %d, want final", got)
	}
	if err := mapErr(withAll(50003, 266)); !errors.Is(err, dialect.ErrInvalid) {
		t.Errorf("THROW 50003 then 266: %v is not ErrInvalid", err)
	}
	if err := mapErr(withAll(1205, 547)); errors.Is(err, dialect.ErrInvalid) {
		t.Errorf("a deadlock followed by 547 mapped to ErrInvalid: %v", err)
	}
	if !isUniqueViolation(withAll(2627, 3621)) {
		t.Error("2627 then 3621 (statement terminated) is not a unique violation")
	}

	d := &SQLServer{}
	calls := 0
	err := d.retry(context.Background(), retrySafe, func(context.Context) error {
		calls++
		if calls == 1 {
			return withAll(1205, 266)
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Errorf("1205 then 266 was not retried: err %v after %d calls", err, calls)
	}
}

func TestCompatibilityRefusalSaysWhatToDo(t *testing.T) {
	probe := mssql.Error{Number: 208, Message: "Invalid object name 'OPENJSON'."}
	msg := compatError("shop", 120, probe).Error()
	for _, want := range []string{"compatibility level 120", "130 or higher", "ALTER DATABASE [shop] SET COMPATIBILITY_LEVEL = 130", "OPENJSON"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	if err := compatError("shop", 150, probe); !errors.As(err, new(mssql.Error)) {
		t.Errorf("the probe's error is not kept: %v", err)
	}
}

// TestConnectionTimeoutBoundsOnlyTheLogin: a server that accepts TCP and never
// answers is given up after the DSN's "connection timeout"; the socket of a
// connection that logged in keeps no deadline (checked on a server by
// TestServerLongStatementOutlivesConnectionTimeout).
func TestConnectionTimeoutBoundsOnlyTheLogin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accept, never answer
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = Open(ctx, "sqlserver://u:p@"+ln.Addr().String()+"?database=x&encrypt=disable&connection+timeout=1")
	if err == nil {
		t.Fatal("a server that never answers was accepted")
	}
	// Open retries broken connections with backoff (5 attempts, up to 8 s apart);
	// without a login bound it would wait for the test's 30 s context.
	if ctx.Err() != nil {
		t.Fatalf("the login was not bounded by connection timeout=1: gave up only after %s: %v", time.Since(start), err)
	}
}
