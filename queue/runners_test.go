package queue

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
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
		ran <- j.t.ID
		if j.t.ID < 0 { // the burst's: held until released
			release.Wait()
		}
	})

	// One after another, with a pause between them like a claim's round
	// trip: a goroutine per attempt would start 20. The pause lets the runner
	// get back to its wait; on a loaded machine it may not always have, so
	// the bound is loose.
	const inRow = 20
	for id := int64(1); id <= inRow; id++ {
		r.start(runnerJob(id))
		if got := <-ran; got != id {
			t.Fatalf("ran task %d, want %d", got, id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := r.spawned.Load(); n > inRow/2 {
		t.Fatalf("%d attempts in a row started %d runners: they are not reused", inRow, n)
	}

	// A burst of attempts that block: each starts at once, on a runner of
	// its own, however few runners there are.
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

	within(t, 10*time.Second, "stop did not end the idle runners", r.stop)
}

// within fails t when fn has not returned after d.
func within(t *testing.T, d time.Duration, failure string, fn func()) {
	t.Helper()
	returned := make(chan struct{})
	go func() { fn(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(d):
		t.Fatal(failure)
	}
}

// TestRunnersEndWhenIdle: a runner left without work ends by itself.
func TestRunnersEndWhenIdle(t *testing.T) {
	done := make(chan struct{})
	r := newRunners(20*time.Millisecond, func(runJob) { close(done) })
	r.start(runnerJob(1))
	<-done
	within(t, 10*time.Second, "the idle runner did not end", r.wg.Wait)
	close(r.done)
}

// TestRunnersWaitTheWholeIdleTime: the idle timer runs on while a runner
// works, so it may fire during an attempt; the runner then waits the whole
// idle time after the attempt before it ends, not the rest of a timer that ran
// out while it was busy.
func TestRunnersWaitTheWholeIdleTime(t *testing.T) {
	const wait = time.Second
	done := make(chan struct{})
	r := newRunners(wait, func(runJob) {
		time.Sleep(wait + wait/5) // the timer fires meanwhile
		close(done)
	})
	r.start(runnerJob(1))
	<-done
	waitFor(t, "the runner did not go back to wait", func() bool { return r.idleCount() == 1 })
	time.Sleep(wait / 10)
	if r.idleCount() != 1 {
		t.Fatalf("the runner ended %v after its attempt; it should wait %v", wait/10, wait)
	}
	within(t, 10*time.Second, "the idle runner did not end", r.wg.Wait)
	close(r.done)
}

// TestRunnersNoAttemptLost: starts racing runners that are giving up their
// wait (an idle time of 50 µs) each run exactly once.
func TestRunnersNoAttemptLost(t *testing.T) {
	const n = 3000
	var runs [n]atomic.Int32
	var wg sync.WaitGroup
	wg.Add(n)
	r := newRunners(50*time.Microsecond, func(j runJob) {
		runs[j.t.ID].Add(1)
		wg.Done()
	})
	for id := range int64(n) {
		r.start(runnerJob(id))
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
		}
	}
	within(t, 30*time.Second, "not every attempt ran", wg.Wait)
	r.stop()
	for id := range runs {
		if got := runs[id].Load(); got != 1 {
			t.Fatalf("attempt %d ran %d times", id, got)
		}
	}
}

// TestRunnersStartAfterStop: a start after stop is a bug of the worker's
// shutdown; it panics rather than run an attempt nothing waits for.
func TestRunnersStartAfterStop(t *testing.T) {
	r := newRunners(time.Hour, func(runJob) {})
	r.stop()
	defer func() {
		if recover() == nil {
			t.Fatal("start after stop did not panic")
		}
	}()
	r.start(runnerJob(1))
}

// TestRunnersLastIdleFirst: after a burst, attempts one at a time go to the
// runner that became idle last, so the others are left without work and end
// after their idle time; taking turns, all six would stay.
func TestRunnersLastIdleFirst(t *testing.T) {
	var release sync.WaitGroup
	ran := make(chan int64, 64)
	r := newRunners(150*time.Millisecond, func(j runJob) {
		ran <- j.t.ID
		if j.t.ID < 0 {
			release.Wait()
		}
	})
	defer r.stop()
	release.Add(1)
	const burst = 6
	for id := int64(-1); id >= -burst; id-- {
		r.start(runnerJob(id))
	}
	for range burst {
		<-ran
	}
	release.Done()
	waitFor(t, "the burst's runners did not all wait for work", func() bool { return r.idleCount() == burst })

	// One attempt every 20 ms for 600 ms: a runner that took every sixth
	// would never wait 150 ms.
	for id := int64(1); id <= 30; id++ {
		r.start(runnerJob(id))
		<-ran
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.idleCount(); n > 2 {
		t.Fatalf("%d runners still wait after 600 ms of one attempt at a time: they took turns", n)
	}
}

// waitFor polls cond for up to 10 s and fails with what if it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}
