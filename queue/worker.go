package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// WorkerConfig configures a Worker. Zero fields take the defaults named.
type WorkerConfig struct {
	// ID names the worker in Workers and Logs; default host-pid-random. Two
	// workers running at once must not share one: they would share a Workers
	// row, and one's stop would mark the other stopped. A worker started again
	// under its ID (a service restart) takes its row over.
	ID string
	// Concurrency is how many tasks run at once (default 4).
	Concurrency int
	// Lease is how long a claimed task stays the worker's without a heartbeat
	// (default 30s). A crashed worker's tasks run again after about this long.
	Lease time.Duration
	// Heartbeat is how often leases are extended and expired ones rescued
	// (default Lease/3).
	Heartbeat time.Duration
	// PollMin and PollMax bound the idle polling interval, which doubles while
	// the queue stays empty (defaults 50ms and 2s). Notifications, where the
	// database has them, wake the worker sooner.
	PollMin, PollMax time.Duration
	// ExitWhenIdle makes Run return once no task has run for this long (the
	// seed's @WaitingTime) and none of the worker's kinds is left to run:
	// none available or scheduled (a retry's backoff, a delay), none waiting
	// for a stage that a running task may still end. Zero runs until the
	// context ends.
	ExitWhenIdle time.Duration
	// StatementTimeout bounds how long the worker waits for the database to
	// answer one of the queue's own statements (claims, completions, stage
	// advances, registration, retention passes, the start of a body; not task
	// bodies) before it gives up on it with an error that says so, and tries
	// again (default 30s).
	// It keeps a database that stops answering mid-statement from hanging the
	// worker. Heartbeats are bounded by half a lease, rescue passes by a beat.
	StatementTimeout time.Duration
	// ShutdownGrace is how long running tasks may take to finish after the
	// context ends (default 30s; negative: none); what is still running then
	// is cancelled and released. A Handler that has not returned within a
	// Lease of that cancel is left running, and Run returns an error (Handler
	// says what follows).
	ShutdownGrace time.Duration
	// RetryBase and RetryMax shape the backoff between failed attempts
	// (defaults 1s and 10m).
	RetryBase, RetryMax time.Duration
	// AllowExec lists the programs that tasks of kind "exec" may run (names found
	// on PATH, or absolute paths). Empty, the default, runs no command at all.
	AllowExec []string
	// TargetDB runs SQL bodies; nil runs them on the queue database. Atomic tasks
	// always need the queue database and fail on a worker with a target.
	TargetDB *sql.DB
	// Logger receives the worker's logs; the zero value logs nothing.
	Logger zerolog.Logger
	// Version is recorded in the Workers table.
	Version string

	// NoScheduler turns off this worker's scheduler loop (scheduler.go).
	NoScheduler bool
	// Retention is what this worker's pruner deletes, and when (prune.go).
	Retention Retention
	// Metrics, when set, records the worker's Prometheus metrics (metrics.go).
	Metrics *Metrics
	// OnPass, when set, is called after each round of work of a background
	// service (ServiceHeartbeat, ServiceRescue, …; service.go): a heartbeat
	// sent, a rescue pass run. Tests wait on it instead of sleeping. It is
	// called from the service's goroutine and must not block.
	OnPass func(service string)
	// VacuumEvery is how many tasks this worker claims between vacuums of the
	// tasks table, on a database whose claims slow down until one
	// (dialect.TaskVacuumer: PostgreSQL); default DefaultVacuumEvery, negative
	// never (autovacuum alone).
	VacuumEvery int
	// Clock is the worker's clock for the scheduler's sleeps (default time.Now);
	// tests inject skewed ones. What is due is always the database's decision.
	Clock func() time.Time
}

func (c *WorkerConfig) setDefaults() error {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Concurrency < 0 || c.Concurrency > 10000 {
		return fmt.Errorf("worker: concurrency must be between 1 and 10000, got %d", c.Concurrency)
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Lease < 100*time.Millisecond {
		return fmt.Errorf("worker: lease must be at least 100ms, got %s", c.Lease)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = min(c.Lease/3, MaxHeartbeat)
	}
	if c.Heartbeat <= 0 || c.Heartbeat >= c.Lease {
		return fmt.Errorf("worker: heartbeat must be positive and shorter than the lease (%s), got %s", c.Lease, c.Heartbeat)
	}
	if c.Heartbeat > MaxHeartbeat {
		return fmt.Errorf("worker: heartbeat must be at most %s (a worker silent for a minute is shown dead), got %s", MaxHeartbeat, c.Heartbeat)
	}
	if c.Retention.Workers > 0 && c.Retention.Workers < MinRetainWorkers {
		return fmt.Errorf("worker: Retention.Workers must be at least %s (a worker beats at most every %s), or the pruner deletes live workers' rows; got %s",
			MinRetainWorkers, MaxHeartbeat, c.Retention.Workers)
	}
	if c.PollMin == 0 {
		c.PollMin = 50 * time.Millisecond
	}
	if c.PollMax == 0 {
		c.PollMax = 2 * time.Second
	}
	if c.PollMin <= 0 || c.PollMax < c.PollMin {
		return fmt.Errorf("worker: poll interval bounds must satisfy 0 < min <= max, got %s and %s", c.PollMin, c.PollMax)
	}
	if c.ExitWhenIdle < 0 {
		return fmt.Errorf("worker: exit-when-idle must not be negative, got %s", c.ExitWhenIdle)
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = 30 * time.Second
	}
	if c.StatementTimeout < 0 {
		return fmt.Errorf("worker: statement timeout must not be negative, got %s", c.StatementTimeout)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.VacuumEvery == 0 {
		c.VacuumEvery = DefaultVacuumEvery
	}
	if c.RetryBase == 0 {
		c.RetryBase = time.Second
	}
	if c.RetryMax == 0 {
		c.RetryMax = 10 * time.Minute
	}
	if c.RetryBase < 0 || c.RetryMax < c.RetryBase {
		return fmt.Errorf("worker: retry backoff bounds must satisfy 0 <= base <= max, got %s and %s", c.RetryBase, c.RetryMax)
	}
	return nil
}

// MaxHeartbeat bounds a worker's heartbeat, whatever its lease: whoever
// reads the Workers table (queuectl status and why, the dashboard, enqueue
// --wait's notes) judges a worker dead after a minute without one, and a
// live worker must beat a few times within that.
const MaxHeartbeat = 20 * time.Second

// Worker claims and runs tasks. Create it with NewWorker, register handlers with
// Handle, then call Run.
type Worker struct {
	d        dialect.Dialect
	cfg      WorkerConfig
	log      zerolog.Logger
	handlers map[string]Handler
	// kinds is Kinds() as of Run: what every claim asks for.
	kinds []string
	// reinstall installs the routines again after a prune dropped them
	// (register.go): the client's Migrate, nil unless it was opened with
	// Config.Migrate.
	reinstall func(context.Context) (uint, error)

	mu      sync.Mutex
	running map[dialect.TaskLease]context.CancelCauseFunc // attempt (task, token) -> cancel of its run, until its end is recorded
	// executing counts the attempts whose body is still running: the worker's
	// capacity is spent on these. An attempt whose body has ended waits for the
	// finisher to record it without holding a slot, so claims and completions
	// overlap; it stays in running (its lease extended) until recorded.
	executing int
	// buffered are prefetched tasks waiting, in claim order, for a slot
	// (capacity.go); they are in running too. stopping: shutdown has taken
	// the buffer, and no buffered task starts any more.
	buffered []bufferedTask
	stopping bool
	bodies   bodyClock // how long bodies run, which decides prefetching
	// taskCtx and tasks are Run's: what every attempt runs under.
	taskCtx context.Context
	tasks   *sync.WaitGroup
	runners *runners // the goroutines attempts run on

	slotFree chan struct{}  // a task ended
	wake     chan struct{}  // work may be available (notification, rescue)
	finishes chan finishReq // to finishLoop, when the dialect records results in batches
	// handBacks carries the other results (a retry, a release, an abandon, a
	// final failure) to a loop of their own (handBackLoop): they lock their process's
	// row, which an application's open submission may hold for long, and must
	// not hold back the successes behind them (issue 10, item 10).
	handBacks chan finishReq
	advances  chan []int64 // to advanceLoop, when the dialect advances stages after completions commit
	// vacuumDue asks the vacuum service for a pass (vacuum.go); nil when
	// there is none. claimedSinceVacuum is the claim loop's count towards it.
	vacuumDue          chan struct{}
	claimedSinceVacuum int
	healthy            atomic.Bool // heartbeats reach the database
	started            atomic.Bool
	phase              atomic.Int32 // phaseStarting…phaseStopped (ready.go)
	// connPause holds claims back while bodies cannot get a connection.
	connPause connPause
	// graceEnded is closed by EndGrace.
	graceEnded chan struct{}
	endGrace   sync.Once
	// wrappedUp is closed once the goroutines that record the attempts' ends
	// have stopped: when Run returns, or after it, when the last task that
	// its shutdown left running ends.
	wrappedUp chan struct{}

	// unextended holds the admitted attempts that no heartbeat has extended
	// yet, with their claims: their leases run from those, and the fail-fast
	// deadline must come before they end (heartbeat.go). unextendedFrom is the
	// earliest claim the deadline was last armed for, or asked to be (see
	// claimMark.origin); admitted tells the heartbeat loop that the first
	// claim came, or an earlier one.
	unextended     map[dialect.TaskLease]claimMark
	unextendedFrom time.Time
	admitted       chan struct{}
	// holder is d as a dialect.WriteLockHolder (nil where it is not one),
	// asserted once: writeHolds runs on every claim and admit.
	holder dialect.WriteLockHolder
}

// NewWorker prepares a worker on the client's database.
func NewWorker(c *Client, cfg WorkerConfig) (*Worker, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	w := &Worker{
		d:        c.d,
		holder:   asWriteLockHolder(c.d),
		cfg:      cfg,
		log:      cfg.Logger.With().Str("worker", cfg.ID).Logger(),
		handlers: map[string]Handler{},
		running:  map[dialect.TaskLease]context.CancelCauseFunc{},
		slotFree: make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),

		unextended: map[dialect.TaskLease]claimMark{},
		admitted:   make(chan struct{}, 1),
		graceEnded: make(chan struct{}),
		wrappedUp:  make(chan struct{}),
	}
	w.runners = newRunners(runnerIdle, w.runAttempt)
	if c.migrate {
		w.reinstall = c.Migrate
	}
	w.healthy.Store(true)
	cfg.Metrics.observeRunning(w.executingCount)
	cfg.Metrics.observeReady(func() bool { return w.Ready() == nil })
	return w, nil
}

// ID is the worker's id as recorded in Workers and Logs.
func (w *Worker) ID() string { return w.cfg.ID }

// Handle registers the handler for a task kind. Kinds are unique, and "sql" is
// the worker's own.
func (w *Worker) Handle(kind string, h Handler) error {
	switch {
	case w.started.Load():
		return errors.New("worker: Handle after Run")
	case kind == "" || kind == KindSQL || kind == KindExec:
		return fmt.Errorf("worker: kind %q is reserved or empty", kind)
	case h == nil:
		return fmt.Errorf("worker: nil handler for kind %q", kind)
	}
	// No task can carry a kind the kind columns cannot hold, and every claim
	// passes the worker's kinds to the database: one it refuses (a NUL byte on
	// PostgreSQL) would fail every claim.
	if err := stages.ValidateKind(kind); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if _, dup := w.handlers[kind]; dup {
		return fmt.Errorf("worker: kind %q already has a handler", kind)
	}
	w.handlers[kind] = h
	return nil
}

// Kinds are the task kinds this worker claims: "sql" always, "exec" when
// AllowExec lists a program, and every kind registered with Handle. A task of
// any other kind is left to the workers that run it; it never burns an
// attempt here.
func (w *Worker) Kinds() []string {
	kinds := []string{KindSQL}
	if len(w.cfg.AllowExec) > 0 {
		kinds = append(kinds, KindExec)
	}
	for k := range w.handlers {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// Run claims and runs tasks until ctx ends (or, with ExitWhenIdle, the queue has
// been idle that long). On the way out it stops claiming, gives running tasks
// ShutdownGrace to finish, and releases the rest so other workers take them at once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	defer w.phase.Store(phaseStopped) // also when it stops while registering
	host, _ := os.Hostname()
	w.kinds = w.Kinds()
	info := dialect.WorkerInfo{ID: w.cfg.ID, Hostname: host, PID: os.Getpid(), Concurrency: w.cfg.Concurrency,
		Version: w.cfg.Version, Kinds: w.kinds}
	if err := w.register(ctx, info); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("worker: %w", err)
	}
	w.log.Info().Int("concurrency", w.cfg.Concurrency).Dur("lease", w.cfg.Lease).Str("dialect", w.d.Name()).Str("database", w.d.Where()).Msg("worker started")

	// Tasks run on a context of their own: the end of ctx stops claiming, while
	// running tasks get the grace period before theirs is cancelled.
	taskCtx, cancelTasks := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelTasks(errShutdown)
	var tasks sync.WaitGroup
	w.taskCtx, w.tasks = taskCtx, &tasks
	// Background services (service.go) outlive ctx: leases are extended, and
	// others' rescued, until the last task has recorded its end.
	background := newServices(context.WithoutCancel(ctx), w.cfg.OnPass)
	list := []service{
		{ServiceHeartbeat, w.heartbeatLoop},
		{ServiceRescue, w.rescueLoop},
		{ServicePrune, w.pruneLoop},
	}
	if n, ok := w.d.(dialect.Notifier); ok {
		// Listening before the first claim, so that no notification after it is missed.
		if ch, err := n.Listen(background.ctx); err != nil {
			w.log.Warn().Err(err).Msg("notifications unavailable; polling only")
		} else {
			list = append(list, service{ServiceListen, func(_ context.Context, pass func()) { w.listenLoop(ch, pass) }})
		}
	}
	if tv, ok := w.d.(dialect.TaskVacuumer); ok && w.cfg.VacuumEvery > 0 {
		w.vacuumDue = make(chan struct{}, 1)
		list = append(list, service{ServiceVacuum, func(bg context.Context, pass func()) { w.vacuumLoop(bg, tv, pass) }})
	}
	if !w.cfg.NoScheduler { // the scheduler stops firing as soon as ctx ends
		list = append(list, service{ServiceScheduler, func(bg context.Context, pass func()) { w.schedulerLoop(ctx, bg, pass) }})
	}
	background.start(list)

	var finisher, advancer sync.WaitGroup
	if sa, ok := w.d.(dialect.StageAdvancer); ok {
		w.advances = make(chan []int64, 4*w.cfg.Concurrency)
		advancer.Add(1)
		go func() { defer advancer.Done(); w.advanceLoop(context.WithoutCancel(ctx), sa, w.advances) }()
	}
	if bf, ok := w.d.(dialect.BatchFinisher); ok {
		w.finishes = make(chan finishReq, w.cfg.Concurrency)
		w.handBacks = make(chan finishReq, w.cfg.Concurrency)
		finisher.Add(2)
		go func() { defer finisher.Done(); w.finishLoop(context.WithoutCancel(ctx), bf, w.finishes) }()
		go func() { defer finisher.Done(); w.handBackLoop(context.WithoutCancel(ctx), bf, w.handBacks) }()
	}

	// Prefetched tasks that never started are handed back as soon as ctx
	// ends, not after the grace period: other workers can run them now.
	// Running to stopping only: a late callback must not undo "stopped".
	w.phase.Store(phaseRunning)
	stopping := func() { w.phase.CompareAndSwap(phaseRunning, phaseStopping) }
	unwatch := context.AfterFunc(ctx, func() { stopping(); w.stopBuffer() })
	err := w.claimLoop(ctx)
	stopping()
	if err != nil {
		// The worker cannot go on (its routines are gone): running tasks could
		// not record their ends either, so they stop now rather than after the
		// grace period, and their leases lapse for another worker to rescue.
		w.log.Error().Err(err).Msg("worker stopping")
		cancelTasks(fmt.Errorf("%w: %w", errShutdown, err)) // released, were it recorded
	}

	unwatch()
	w.stopBuffer() // also when the claim loop ended without ctx (ExitWhenIdle)
	ended, left := w.shutdown(&tasks, cancelTasks)
	// What records the tasks' ends stops once they have all ended: at once,
	// or, for tasks shutdown left running, whenever the last of them does.
	wrapUp := func() {
		w.runners.stop()
		if w.finishes != nil {
			close(w.finishes)
			close(w.handBacks)
			finisher.Wait()
		}
		if w.advances != nil {
			close(w.advances)
			advancer.Wait()
		}
		close(w.wrappedUp)
	}
	if left == 0 {
		wrapUp()
	} else {
		err = errors.Join(err, fmt.Errorf("worker: %d task(s) whose bodies still ran %s after their cancel were left to lapse: "+
			"their leases are no longer extended, and another worker's rescue runs them again once they expire "+
			"(a Handler that ignores its context?)", left, w.cfg.Lease))
		go func() { <-ended; wrapUp() }()
	}
	background.stop()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := w.d.WorkerStop(stopCtx, w.cfg.ID); serr != nil {
		w.log.Warn().Err(serr).Msg("could not mark worker stopped")
	}
	w.log.Info().Msg("worker stopped")
	return err
}

// claimLoop is the worker's heart: claim up to the free capacity, start each
// task, and wait (backing off while the queue is empty) when there is nothing
// to claim or no capacity to claim with.
func (w *Worker) claimLoop(ctx context.Context) error {
	// How long a claim in flight at shutdown gets (see the claim below).
	cut := max(min(w.cfg.ShutdownGrace, claimAfterShutdown), claimAfterShutdownMin)
	poll := w.cfg.PollMin
	lastWork := time.Now()
	// backlog: the last claim got all it asked for, so more tasks are likely
	// waiting, and the next claim gathers free slots first (capacity.go).
	backlog := false
	leftNoted := "" // the work left last logged, with ExitWhenIdle
	for {
		if ctx.Err() != nil {
			return nil
		}
		w.releaseStaleBuffer()
		free := w.freeSlots()
		claimed := 0
		paused := w.connPause.left()
		if free > 0 && w.healthy.Load() && paused == 0 {
			began := time.Now()
			// A claim in flight when shutdown begins is finished, not cut
			// short: cancelled after the database committed it, its tasks would
			// stay leased to this worker, unrun and unreleased, until their
			// leases expired. Its tasks are then handed back unstarted. Once
			// shutdown has begun it gets a short while more (a claim takes
			// milliseconds), so the grace of the running tasks stays the bound;
			// with a grace of none or almost none, claimAfterShutdownMin.
			cctx, cancel := w.stmtCtx(context.WithoutCancel(ctx))
			sent, _ := bootClock()
			holding, held := w.writeHolds()
			stop := context.AfterFunc(ctx, func() { time.AfterFunc(cut, cancel) })
			got, err := w.d.TaskClaim(cctx, dialect.ClaimParams{
				WorkerID: w.cfg.ID, Max: free, Token: newToken(), Lease: w.cfg.Lease, Kinds: w.kinds,
			})
			err = w.stmtErr(cctx, ctx, "claim", err)
			stop()
			cancel()
			w.cfg.Metrics.claimedTasks(got, time.Since(began))
			if ctx.Err() != nil {
				w.handBackClaimed(got)
				return nil
			}
			if err != nil {
				if gone := w.routinesGoneAfter(ctx, err); gone != nil {
					return gone // a claim that failed claimed nothing
				}
				w.log.Error().Err(err).Msg("claim failed; backing off")
			}
			if holding {
				_, held = w.writeHolds() // the claim ran after that hold
			}
			for _, t := range got {
				w.admit(attempt{ClaimedTask: t, claimSent: sent, claim: claimMark{sent: began, held: held}})
			}
			claimed = len(got)
			backlog = err == nil && claimed == free
			w.noteClaimed(claimed)
		}
		if claimed > 0 || w.heldCount() > 0 {
			lastWork = time.Now()
		}
		if claimed > 0 {
			poll = w.cfg.PollMin
			if backlog {
				w.gatherSlots(ctx)
				continue // there may be more; the next pass finds out
			}
		}
		if w.cfg.ExitWhenIdle > 0 && w.heldCount() == 0 && time.Since(lastWork) >= w.cfg.ExitWhenIdle {
			left, err := w.workLeft(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err == nil && left == "":
				w.log.Info().Dur("idle", w.cfg.ExitWhenIdle).Msg("queue idle; exiting")
				return nil
			case err != nil:
				w.log.Warn().Err(err).Msg("could not tell whether work is left; staying")
			case left != leftNoted:
				w.log.Info().Str("left", left).Msg("nothing ran for the idle time, but work is left; staying")
			}
			leftNoted = left
			lastWork = time.Now() // asked again after another idle time
		}
		wait := poll
		if paused > 0 {
			wait = paused
		}
		if w.cfg.ExitWhenIdle > 0 {
			wait = min(wait, max(w.cfg.ExitWhenIdle-time.Since(lastWork), time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-w.wake:
			// Claim now, but keep the backoff: a wake-up is a hint (on SQLite any
			// commit, a heartbeat included), and only a claim that finds work
			// resets the polling interval.
		case <-w.slotFree:
			// Results are recorded in batches, so slots free in bursts: let the
			// rest of the burst go first, and claim for all of it at once.
			runtime.Gosched()
			if backlog {
				w.gatherSlots(ctx)
			}
		case <-timer.C:
			if claimed == 0 && free > 0 {
				poll = min(poll*2, w.cfg.PollMax)
			}
		}
		timer.Stop()
	}
}

// claimAfterShutdown bounds a claim still in flight when shutdown begins, and
// claimAfterShutdownMin is the least it gets: cut at once (a shutdown grace of
// none), a claim the database had committed would leave its tasks leased to
// this worker, unrun, until their leases expired.
const (
	claimAfterShutdown    = 2 * time.Second
	claimAfterShutdownMin = 250 * time.Millisecond
)

// launch runs an admitted attempt on a runner (runners.go). Called with w.mu
// held and the attempt's slot counted in executing.
func (w *Worker) launch(runCtx context.Context, cancel context.CancelCauseFunc, t attempt) {
	w.tasks.Add(1)
	w.runners.start(runJob{ctx: runCtx, cancel: cancel, t: t})
}

// runAttempt runs one attempt to its recorded end, giving its slot back as
// soon as its body has ended; its runner may then run another.
func (w *Worker) runAttempt(j runJob) {
	t, cancel := j.t, j.cancel
	key := dialect.TaskLease{ID: t.ID, Token: t.Token}
	defer w.tasks.Done()
	began := time.Now()
	// Called by runTask when the body ends and again, deferred, in case it
	// did not get that far; both on this goroutine, so a flag is enough.
	freed := false
	bodyDone := func() {
		if freed {
			return
		}
		freed = true
		w.bodies.observe(time.Since(began))
		w.mu.Lock()
		w.slotFreed()
		w.mu.Unlock()
		signal(w.slotFree)
	}
	defer func() {
		bodyDone()
		w.mu.Lock()
		delete(w.running, key)
		w.mu.Unlock()
		cancel(nil)
		signal(w.slotFree)
	}()
	w.runTask(j.ctx, t, bodyDone)
}

// executingCount is the attempts whose body is running.
func (w *Worker) executingCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.executing
}

// heldCount is the attempts the worker holds: executing, or waiting for their
// end to be recorded.
func (w *Worker) heldCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// shutdown waits up to the grace period for running tasks, then cancels the rest;
// their attempts end as released (runner.go), so other workers take them at once.
// It returns once every task has ended, or once a body still runs a lease after
// its cancel: Go cannot stop a Handler that ignores its context, and the worker
// must not wait for one for ever (Run then leaves it to lapse). Bodies that have
// ended are waited for until their ends are recorded, however long the database
// makes that take: the statement timeout bounds it. The channel it returns
// closes when the last task has ended; left is how many bodies it left running.
func (w *Worker) shutdown(tasks *sync.WaitGroup, cancelTasks context.CancelCauseFunc) (ended <-chan struct{}, left int) {
	done := make(chan struct{})
	go func() { tasks.Wait(); close(done) }()
	if n := w.heldCount(); n > 0 {
		w.log.Info().Int("running", n).Dur("grace", max(w.cfg.ShutdownGrace, 0)).Msg("waiting for running tasks")
	}
	select {
	case <-done:
		return done, 0
	case <-time.After(w.cfg.ShutdownGrace):
		w.log.Warn().Int("running", w.heldCount()).Msg("grace period over; releasing running tasks")
	case <-w.graceEnded:
		w.log.Warn().Int("running", w.heldCount()).Msg("grace period ended early; releasing running tasks")
	}
	cancelTasks(errShutdown)
	select {
	case <-done:
	case <-time.After(w.cfg.Lease):
		if n := w.executingCount(); n > 0 {
			w.log.Error().Int("running", n).Dur("after", w.cfg.Lease).
				Msg("task bodies still running after their cancel: leaving them to lapse (a Handler that ignores its context?)")
			return done, n
		}
		<-done // every body has ended: their ends are being recorded
	}
	return done, 0
}

// EndGrace ends the shutdown's grace period at once, or makes it none if the
// shutdown has not begun: running tasks are released as when it runs out (a
// second SIGTERM or SIGINT to the worker command). It does not stop the
// worker; ending Run's context does.
func (w *Worker) EndGrace() { w.endGrace.Do(func() { close(w.graceEnded) }) }

// newToken is a lease token: random, so a stale holder cannot guess the next one.
func newToken() int64 { return rand.Int64N(1<<62) + 1 }

// signal delivers without blocking; one pending signal is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// stmtCtx bounds one of the queue's own statements by the statement timeout.
func (w *Worker) stmtCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.cfg.StatementTimeout)
}

// stmtErr says so when a statement run under stmtCtx's sctx failed because the
// database did not answer in time (and not because parent ended).
func (w *Worker) stmtErr(sctx, parent context.Context, what string, err error) error {
	if err == nil || parent.Err() != nil || !errors.Is(sctx.Err(), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%s: the database did not answer within the statement timeout (%s, --statement-timeout): %w",
		what, w.cfg.StatementTimeout, err)
}
