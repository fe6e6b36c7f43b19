package queue

import (
	"context"
	"sync"
	"testing"
	"time"
)

func runnerJob(id int64) runJob {
	var a attempt
	a.ID = id
	return runJob{ctx: context.Background(), t: a}
}

// TestRunnersReuse: attempts that follow one another run on the runners
// already there, a burst gets a runner per attempt (none waits for one), and
// stop ends the idle ones.
func TestRunnersReuse(t *testing.T) {
	var release sync.WaitGroup
	ran := make(chan int64, 64)
	r := newRunners(time.Hour, func(j runJob) {
		if j.t.ID < 0 { // the burst's: held until released
			ran <- j.t.ID
			release.Wait()
			return
		}
		ran <- j.t.ID
	})

	// One after another, with the pause a claim's round trip gives: a
	// goroutine per attempt would start 20.
	const inRow = 20
	for id := int64(1); id <= inRow; id++ {
		r.start(runnerJob(id))
		if got := <-ran; got != id {
			t.Fatalf("ran task %d, want %d", got, id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if n := r.spawned.Load(); n > inRow/4 {
		t.Fatalf("%d attempts in a row started %d runners: they are not reused", inRow, n)
	}
	before := r.spawned.Load()

	// A burst of attempts that block: each starts at once, on a runner of
	// its own.
	release.Add(1)
	const burst = 6
	for id := int64(-1); id >= -burst; id-- {
		r.start(runnerJob(id))
	}
	for range burst {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("an attempt of the burst did not start: it waited for a runner")
		}
	}
	release.Done()
	if n := r.spawned.Load(); n < burst || n > before+burst {
		t.Fatalf("after a burst of %d: %d runners in all (%d before), want %d to %d", burst, n, before, burst, before+burst)
	}

	stopped := make(chan struct{})
	go func() { r.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end the idle runners")
	}
}

// TestRunnersEndWhenIdle: a runner left without work ends by itself.
func TestRunnersEndWhenIdle(t *testing.T) {
	done := make(chan struct{})
	r := newRunners(20*time.Millisecond, func(runJob) { close(done) })
	r.start(runnerJob(1))
	<-done
	ended := make(chan struct{})
	go func() { r.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle runner did not end after its idle time")
	}
	close(r.done)
}
