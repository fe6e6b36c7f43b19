package dashboard_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

var thRe = regexp.MustCompile(`<th>([^<]*)</th>`)

// TestTimeColumnsNameTheirZone: every column of timestamps says UTC, as the
// task page's "Run at … UTC" and the logs' "Started (UTC)" do. Before, the
// tasks table's "Run at", the logs' "Ended" and the schedules' "Last run"
// showed UTC wall-clock times unmarked, read as local time by an operator
// east or west of UTC.
func TestTimeColumnsNameTheirZone(t *testing.T) {
	eachQueue(t, func(t *testing.T, dsn string, c *queue.Client) {
		ctx := context.Background()
		one := 1
		if _, err := c.ScheduleAdd(ctx, queue.Schedule{Name: "hourly", Every: stages.Duration(time.Hour),
			Plan: stages.Plan{Process: "refresh", Stages: []stages.Stage{{Order: &one, Tasks: []stages.Task{{Body: "SELECT 1"}}}}}}); err != nil {
			t.Fatal(err)
		}
		base, _ := serve(t, dsn, "--addr", "127.0.0.1:0")
		for _, path := range []string{"/tasks", "/logs", "/schedules", "/workers"} {
			_, page := fetch(t, "GET", base+path)
			for _, m := range thRe.FindAllStringSubmatch(page, -1) {
				h := m[1]
				if (strings.Contains(h, "Run at") || strings.Contains(h, "Ended") || strings.Contains(h, "Started") ||
					strings.Contains(h, "run") && !strings.Contains(h, "Running")) && !strings.Contains(h, "UTC") {
					t.Errorf("%s: column %q shows times without naming their zone (UTC)", path, h)
				}
			}
		}
	})
}
