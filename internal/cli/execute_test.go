package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/spf13/cobra"
)

// TestErrorNamesTheCommandOnce: Execute puts the command's name before an
// error, unless the error already starts with it (a Worker's errors say
// "worker: "), so a worker that stops reads "worker: …", not "worker: worker: …".
func TestErrorNamesTheCommandOnce(t *testing.T) {
	for _, c := range []struct{ err, want string }{
		{"worker: routines gone while running", "worker: routines gone while running\n"},
		{"claim: connection refused", "worker: claim: connection refused\n"},
		{"workers: a word that only starts alike", "worker: workers: a word that only starts alike\n"},
	} {
		cmd := &cobra.Command{Use: "worker", RunE: func(*cobra.Command, []string) error { return errors.New(c.err) }}
		var stderr bytes.Buffer
		if code := Execute(context.Background(), cmd, nil, io.Discard, &stderr); code != ExitFailure || stderr.String() != c.want {
			t.Errorf("error %q: exit %d, stderr %q; want %d, %q", c.err, code, stderr.String(), ExitFailure, c.want)
		}
	}
}
