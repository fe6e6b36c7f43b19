//go:build !stageq_no_sqlite

package queue_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/queue"
	"github.com/stageq/stageq/stages"
)

// A program that embeds stageq: enqueue a two-stage plan of Go-handled tasks,
// run a worker, wait for the process to end, and read the audit trail.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stageq-example-")
	defer os.RemoveAll(dir)

	client, err := queue.Open(ctx, "sqlite://"+filepath.Join(dir, "queue.db"), queue.Config{Migrate: true})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	extract, load := 100, 200
	_, err = client.Submit(ctx, stages.Plan{
		Process: "greetings",
		Stages: []stages.Stage{
			{Order: &extract, Tasks: []stages.Task{{Kind: "greet", Body: "Ada"}, {Kind: "greet", Body: "Grace"}}},
			{Order: &load, Tasks: []stages.Task{{Kind: "greet", Body: "everyone"}}},
		},
	})
	if err != nil {
		panic(err)
	}

	worker, err := queue.NewWorker(client, queue.WorkerConfig{Concurrency: 2})
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	greeted := map[int][]string{}
	worker.Handle("greet", func(ctx context.Context, t *queue.Task) error {
		mu.Lock()
		defer mu.Unlock()
		greeted[t.Order] = append(greeted[t.Order], t.Body)
		return nil
	})
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(wctx) }() // until stopped

	p, err := client.Wait(ctx, "greetings", 20*time.Millisecond) // until the process ends
	if err != nil {
		panic(err)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	fmt.Println("process", p.Name, p.State)
	fmt.Println("stage 100 greeted", len(greeted[100]), "people; stage 200 greeted", greeted[200])
	logs, _ := client.Logs(ctx, dialect.LogFilter{Process: "greetings"})
	fmt.Println(len(logs), "attempts in Logs")
	// Output:
	// process greetings succeeded
	// stage 100 greeted 2 people; stage 200 greeted [everyone]
	// 3 attempts in Logs
}
