package postgres

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/internal/pgtest"
)

// TestOpenKeepsTheContextsError: a first connection that the caller's context
// ended (cancelled, or past its deadline) fails with an error that errors.Is
// tells as context.Canceled or context.DeadlineExceeded, as Go callers expect
// of a call that takes a context, and still without the DSN's password; a
// refusal (no such database) is neither. Before, the driver's error reached
// the caller as text only, and a service that shut down while opening its
// queue could not tell its own cancel from a failed database.
func TestOpenKeepsTheContextsError(t *testing.T) {
	dsn := pgtest.NewDatabase(t, "open_ctx")
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "S3cretPW")
	withPassword := u.String()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"cancelled", cancelled, context.Canceled}, {"past its deadline", expired, context.DeadlineExceeded}} {
		d, err := Open(c.ctx, withPassword)
		if err == nil {
			d.Close()
			t.Fatalf("%s: Open succeeded", c.name)
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v is not %v", c.name, err, c.want)
		}
		if strings.Contains(err.Error(), "S3cretPW") {
			t.Errorf("%s: %v shows the password", c.name, err)
		}
	}

	u.User = nil
	u.Path = "/" + strings.TrimPrefix(u.Path, "/") + "_missing"
	d, err := Open(context.Background(), u.String())
	if err == nil {
		d.Close()
		t.Fatal("Open of a missing database succeeded")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a refusal reads as the context's error: %v", err)
	}
}
