// Command leaseprobe is a test helper for conformance/lease_test.go: a lease
// competitor that runs as its own OS process, so the tests can race, kill
// (SIGKILL) and pause (SIGSTOP) real holders. It lives under testdata so that
// ./... leaves it out; the tests build it by path.
//
//	leaseprobe loop --dsn D --name L --holder H --ttl 5s --holds 8 --for 60s
//	    loops TryAcquire / work / Release, printing "run TOKEN START_NS END_NS"
//	    for every time it held the lease (work is between START and END), until
//	    it has held it --holds times (0: no count) or --for has passed.
//	leaseprobe hold --dsn D --name L --holder H --ttl 1s
//	    takes the lease and keeps it with Hold, printing "acquired TOKEN"; when
//	    its context is cancelled it prints "cancelled: CAUSE", then the answer of
//	    one more Extend ("extend: ERR"), and Hold's result ("hold: ERR").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/stageq/stageq/lease"
	"github.com/stageq/stageq/queue"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: leaseprobe loop|hold [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dsn := fs.String("dsn", "", "queue database")
	name := fs.String("name", "probe", "lease name")
	holder := fs.String("holder", "", "holder identity")
	ttl := fs.Duration("ttl", 5*time.Second, "lease ttl")
	dur := fs.Duration("for", 20*time.Second, "loop: how long to compete at the most")
	holds := fs.Int("holds", 0, "loop: stop after holding the lease this many times (0: only --for stops it)")
	_ = fs.Parse(os.Args[2:])

	ctx := context.Background()
	c, err := queue.Open(ctx, *dsn, queue.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "leaseprobe:", err)
		os.Exit(1)
	}
	defer c.Close()
	lk := lease.New(c.Dialect(), lease.Options{Holder: *holder})

	switch os.Args[1] {
	case "loop":
		os.Exit(loop(ctx, lk, *name, *ttl, *dur, *holds))
	case "hold":
		os.Exit(hold(ctx, lk, *name, *ttl))
	}
	fmt.Fprintln(os.Stderr, "leaseprobe: unknown mode", os.Args[1])
	os.Exit(2)
}

func loop(ctx context.Context, lk *lease.Locker, name string, ttl, dur time.Duration, holds int) int {
	end := time.Now().Add(dur)
	for held := 0; time.Now().Before(end) && (holds == 0 || held < holds); {
		l, err := lk.TryAcquire(ctx, name, ttl)
		if errors.Is(err, lease.ErrNotAcquired) {
			time.Sleep(time.Duration(2+rand.IntN(10)) * time.Millisecond)
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "acquire:", err)
			return 1
		}
		start := time.Now().UnixNano()
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond) // the guarded work
		if rand.IntN(4) == 0 {
			// Reentrancy: the holder acquiring again keeps its token.
			again, err := lk.TryAcquire(ctx, name, ttl)
			if err != nil || again.Token() != l.Token() {
				fmt.Fprintf(os.Stderr, "re-acquire: token %d -> %v, %v\n", l.Token(), again, err)
				return 1
			}
		}
		stop := time.Now().UnixNano()
		if err := l.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "release:", err)
			return 1
		}
		fmt.Printf("run %d %d %d\n", l.Token(), start, stop)
		held++
	}
	return 0
}

func hold(ctx context.Context, lk *lease.Locker, name string, ttl time.Duration) int {
	l, err := lk.TryAcquire(ctx, name, ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "acquire:", err)
		return 1
	}
	fmt.Printf("acquired %d\n", l.Token())
	err = l.Hold(ctx, func(ctx context.Context) error {
		<-ctx.Done()
		fmt.Printf("cancelled: %v\n", context.Cause(ctx))
		fmt.Printf("extend: %v\n", l.Extend(context.Background()))
		return nil
	})
	fmt.Printf("hold: %v\n", err)
	if errors.Is(err, lease.ErrLost) {
		return 4
	}
	return 0
}
