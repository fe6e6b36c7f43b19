package dialect

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Sentinel errors of schedules and exclusive leases.
var (
	// ErrExists means a schedule with that name already exists; nothing changed.
	ErrExists = errors.New("already exists")
	// ErrConflict means a schedule changed under the caller (another worker
	// advanced it first); the caller's transaction must be rolled back.
	ErrConflict = errors.New("conflict: the row changed meanwhile")
	// ErrTickRecorded is the ErrConflict of ScheduleFire when the tick already
	// has its run row (the run history's key is the schedule and the tick). A
	// run-now recorded at the very instant of a later tick leaves one; the
	// caller's transaction must be rolled back.
	ErrTickRecorded = fmt.Errorf("%w: the tick already has a run", ErrConflict)
)

// Scheduler is what the core asks of a database for recurring schedules and
// exclusive leases. Every time that decides something (is a tick due, has a lease
// expired) is the database's clock; the callers' clocks are never trusted.
//
// How to implement it:
//
//  1. ScheduleLockDue must lock the row it returns until the transaction ends and
//     skip rows other transactions hold (FOR UPDATE SKIP LOCKED; READPAST with
//     UPDLOCK on SQL Server; SQLite's BEGIN IMMEDIATE already serialises writers).
//  2. ScheduleFire must advance next_run only if it still equals the value read
//     (ErrConflict otherwise) and record the run, in the caller's transaction, so
//     that the advance and the enqueue (Dialect.Submit in the same transaction)
//     commit together.
//  3. LeaseTryAcquire must be one atomic statement: insert, take over an expired
//     or released lease (token+1), or re-acquire one's own (same token).
//  4. LeaseExtend and LeaseRelease are fenced by holder and token; LeaseExtend also
//     refuses an expired lease. Both return ErrLeaseLost when the fence fails.
type Scheduler interface {
	// ClockNow reads the database's clock, in tx (its now) or on the pool.
	ClockNow(ctx context.Context, tx *sql.Tx) (time.Time, error)
	// ScheduleCreate inserts a schedule, in tx or on the pool; ErrExists when
	// the name is taken.
	ScheduleCreate(ctx context.Context, tx *sql.Tx, p ScheduleCreateParams) (int64, error)
	// ScheduleList reads schedules ordered by name; Name "" lists all.
	ScheduleList(ctx context.Context, f ScheduleFilter) ([]ScheduleInfo, error)
	// ScheduleSetPaused pauses or resumes a schedule; ErrNotFound when unknown.
	ScheduleSetPaused(ctx context.Context, p SchedulePauseParams) error
	// ScheduleDelete removes a schedule and its run history (tasks already
	// enqueued stay); ErrNotFound when unknown.
	ScheduleDelete(ctx context.Context, name string) error
	// ScheduleLockDue locks, in tx, the unpaused schedule whose next_run is the
	// earliest at or before the database's now among those no one else holds.
	// ok is false when none is due. now is the database's clock.
	ScheduleLockDue(ctx context.Context, tx *sql.Tx) (s ScheduleInfo, now time.Time, ok bool, err error)
	// ScheduleLock locks the named schedule in tx, waiting for other holders;
	// ErrNotFound when unknown.
	ScheduleLock(ctx context.Context, tx *sql.Tx, name string) (s ScheduleInfo, now time.Time, err error)
	// ScheduleUnfinished reports whether any task enqueued by the schedule is
	// still in the queue (pending, running or failed for good).
	ScheduleUnfinished(ctx context.Context, tx *sql.Tx, name string) (bool, error)
	// ScheduleFire records one handled tick in tx: it tags the tasks enqueued for
	// it, writes the run's audit row (ErrTickRecorded when the tick has one),
	// and (when p.Advance) moves next_run from p.PrevNextRun to p.NextRun,
	// returning ErrConflict when next_run moved.
	ScheduleFire(ctx context.Context, tx *sql.Tx, p ScheduleFireParams) error
	// ScheduleNextDue is how long until the earliest unpaused next_run, by the
	// database's clock (zero or negative: something is due). ok is false when
	// there is no unpaused schedule.
	ScheduleNextDue(ctx context.Context) (wait time.Duration, ok bool, err error)
	// ScheduleRunList reads the run history of a schedule, oldest first.
	ScheduleRunList(ctx context.Context, f ScheduleRunFilter) ([]ScheduleRun, error)

	// LeaseTryAcquire takes the named lease for p.Holder if it is free, expired,
	// or already p.Holder's. acquired is false when another holder has it, and
	// the answer then describes that holder.
	LeaseTryAcquire(ctx context.Context, p LeaseAcquireParams) (l LeaseInfo, acquired bool, err error)
	// LeaseExtend pushes the expiry to the database's now plus p.TTL, if the lease
	// is still held with p.Token and has not expired; ErrLeaseLost otherwise.
	LeaseExtend(ctx context.Context, p LeaseExtendParams) (LeaseInfo, error)
	// LeaseRelease frees the lease if p.Holder still holds it with p.Token;
	// ErrLeaseLost otherwise, changing nothing.
	LeaseRelease(ctx context.Context, p LeaseReleaseParams) error
	// LeaseList reads leases ordered by name.
	LeaseList(ctx context.Context, f LeaseFilter) ([]LeaseInfo, error)
}

// Missed-tick policies of a schedule.
const (
	// MissedSkip drops ticks that are later than the schedule's grace (the
	// default): after downtime the schedule resumes at its next tick.
	MissedSkip = "skip"
	// MissedOnce enqueues one run for all the ticks missed, then resumes.
	MissedOnce = "once"
)

// Outcomes of a schedule's tick, in ScheduleRun.Outcome.
const (
	RunEnqueued = "enqueued"  // the tick's run was enqueued
	RunCaughtUp = "caught-up" // one run enqueued for ticks missed beyond the grace
	RunMissed   = "missed"    // ticks beyond the grace dropped (policy skip)
	RunSkipped  = "skipped"   // singleton: the previous run was still unfinished
	RunManual   = "manual"    // run-now by an operator
	RunFailed   = "failed"    // the database refused the run (the worker's log says why); the schedule moved on
)

// ScheduleCreateParams describes a new schedule. Exactly one of Cron and
// Interval is set; the caller has validated both and computed NextRun.
type ScheduleCreateParams struct {
	Name      string
	Cron      string
	Interval  time.Duration
	Plan      string // a stages.Plan as JSON
	Missed    string
	Grace     time.Duration
	Singleton bool
	Paused    bool
	NextRun   time.Time
}

// ScheduleInfo is a row of the schedules table.
type ScheduleInfo struct {
	ID           int64         `json:"id"`
	Name         string        `json:"name"`
	Cron         string        `json:"cron,omitempty"`
	Interval     time.Duration `json:"-"` // as interval_seconds (MarshalJSON)
	Plan         string        `json:"plan"`
	Missed       string        `json:"missed"`
	Grace        time.Duration `json:"-"` // as grace_seconds
	Singleton    bool          `json:"singleton"`
	Paused       bool          `json:"paused"`
	NextRun      time.Time     `json:"next_run,omitzero"`
	LastRun      *time.Time    `json:"last_run,omitempty"`
	LastOutcome  string        `json:"last_outcome,omitempty"`
	LastWorkerID string        `json:"last_worker_id,omitempty"`
	LastFiredAt  *time.Time    `json:"last_fired_at,omitempty"`
}

// MarshalJSON writes the durations in seconds, like every stageq JSON output,
// and the plan as the JSON object it is stored as, not as a string of it.
func (s ScheduleInfo) MarshalJSON() ([]byte, error) {
	type plain ScheduleInfo // without this method
	var plan any = s.Plan
	if json.Valid([]byte(s.Plan)) {
		plan = json.RawMessage(s.Plan)
	}
	out := struct {
		plain
		Plan            any     `json:"plan"`
		IntervalSeconds float64 `json:"interval_seconds,omitempty"`
		GraceSeconds    float64 `json:"grace_seconds"`
	}{plain(s), plan, s.Interval.Seconds(), s.Grace.Seconds()}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes, so that the JSON of `queuectl
// schedule list --json` reads back into ScheduleInfo.
func (s *ScheduleInfo) UnmarshalJSON(b []byte) error {
	type plain ScheduleInfo // without this method
	var in struct {
		plain
		Plan            json.RawMessage `json:"plan"`
		IntervalSeconds float64         `json:"interval_seconds"`
		GraceSeconds    float64         `json:"grace_seconds"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*s = ScheduleInfo(in.plain)
	s.Interval = time.Duration(math.Round(in.IntervalSeconds * float64(time.Second)))
	s.Grace = time.Duration(math.Round(in.GraceSeconds * float64(time.Second)))
	var text string
	if err := json.Unmarshal(in.Plan, &text); err == nil {
		s.Plan = text // a plan written as a string of JSON
		return nil
	}
	var compact bytes.Buffer
	if len(in.Plan) > 0 {
		if err := json.Compact(&compact, in.Plan); err != nil {
			return fmt.Errorf("schedule plan: %w", err)
		}
	}
	s.Plan = compact.String()
	return nil
}

// ScheduleFilter selects schedules; zero fields do not filter.
type ScheduleFilter struct {
	Name string
}

// SchedulePauseParams pauses or resumes a schedule.
type SchedulePauseParams struct {
	Name   string
	Paused bool
}

// ScheduleFireParams records one handled tick.
type ScheduleFireParams struct {
	ScheduleID   int64
	ScheduleName string
	WorkerID     string
	ScheduledFor time.Time // the tick (the run's identity with the schedule)
	Outcome      string    // one of the Run* constants
	ProcessID    int64     // the process the run went to; 0 when nothing was enqueued
	TaskIDs      []int64   // tasks enqueued for the tick, to be tagged with it
	// Advance moves next_run from PrevNextRun to NextRun (not for run-now).
	Advance     bool
	PrevNextRun time.Time
	NextRun     time.Time
	// PruneBefore deletes the schedule's run history older than this.
	PruneBefore time.Time
	// Recorded writes no run row, for a tick that has one already
	// (ErrTickRecorded): the advance or the last-run note only.
	Recorded bool
}

// ScheduleRunFilter selects one schedule's runs; Limit 0 reads all.
type ScheduleRunFilter struct {
	Name  string
	Limit int
}

// ScheduleRun is one handled tick of a schedule.
type ScheduleRun struct {
	ScheduledFor time.Time `json:"scheduled_for"`
	Outcome      string    `json:"outcome"`
	ProcessID    int64     `json:"process_id,omitempty"`
	// Process is the run's process name while retention keeps the process.
	Process   string    `json:"process,omitempty"`
	TaskCount int       `json:"task_count"`
	WorkerID  string    `json:"worker_id"`
	FiredAt   time.Time `json:"fired_at,omitzero"`
}

// LeaseAcquireParams asks for an exclusive lease.
type LeaseAcquireParams struct {
	Name   string
	Holder string
	TTL    time.Duration
}

// LeaseExtendParams extends a held lease.
type LeaseExtendParams struct {
	Name   string
	Holder string
	Token  int64
	TTL    time.Duration
}

// LeaseReleaseParams releases a held lease.
type LeaseReleaseParams struct {
	Name   string
	Holder string
	Token  int64
}

// LeaseFilter selects leases; HeldOnly leaves out released and expired ones.
type LeaseFilter struct {
	Name     string
	HeldOnly bool
}

// LeaseInfo is a lease row as the database saw it at Now.
type LeaseInfo struct {
	Name       string    `json:"name"`
	Holder     string    `json:"holder,omitempty"` // "" when released
	Token      int64     `json:"token"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	Now        time.Time `json:"now"` // the database's clock when read
}

// Held reports whether the lease had a live holder when it was read.
func (l LeaseInfo) Held() bool { return l.Holder != "" && l.ExpiresAt.After(l.Now) }
