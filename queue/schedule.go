package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	_ "time/tzdata" // every worker must read CRON_TZ zones the same way, with or without system tzdata

	"github.com/robfig/cron/v3"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/stages"
)

// Schedule is a recurring submission: a named template (one task or a whole
// multi-stage plan) enqueued at every tick of a cron expression or an interval.
//
// Which ticks are due is decided by the database's clock. Every worker runs the
// scheduler (see WorkerConfig.NoScheduler); for each tick exactly one of them
// enqueues the run, in the same transaction that advances the schedule.
//
// Runs go to the plan's process, or to a process named after the schedule when
// the plan names none, and their tasks (and Logs rows) carry the schedule's name
// and the tick. Runs of one schedule share that process, so a multi-stage run
// enqueued while the previous one is unfinished joins its stage barrier; use
// Singleton to keep runs from overlapping.
type Schedule struct {
	Name string `json:"name" yaml:"name"`
	// Cron is a cron expression: five fields (minute hour day-of-month month
	// day-of-week), or six with seconds first, or a descriptor (@hourly, @daily,
	// @weekly, @monthly, @yearly). A CRON_TZ=Europe/Paris prefix names its time
	// zone; without one, TimeZone applies, and without that UTC (never the
	// worker's local zone, which may differ across the cluster).
	Cron     string `json:"cron,omitempty" yaml:"cron,omitempty"`
	TimeZone string `json:"time_zone,omitempty" yaml:"time_zone,omitempty"`
	// Every is an interval, the alternative to Cron, of at least
	// MinScheduleInterval. Ticks are Start, Start+Every, …
	Every stages.Duration `json:"every,omitempty" yaml:"every,omitempty"`
	// Start is the first tick of an interval schedule; by default one interval
	// after creation, on the database's clock.
	Start time.Time `json:"start,omitempty" yaml:"start,omitempty"`
	// Plan is what each tick enqueues.
	Plan stages.Plan `json:"plan" yaml:"plan"`
	// Missed says what happens to ticks that were not enqueued within Grace of
	// their time (every worker was down, or the schedule was paused):
	// "skip" (the default) drops them and resumes at the next tick; "once"
	// enqueues one run for all of them (its tick is the first one missed), then
	// resumes.
	Missed string `json:"missed,omitempty" yaml:"missed,omitempty"`
	// Grace is how late a tick may be enqueued and still count as on time
	// (default DefaultScheduleGrace). Late ticks within it are each enqueued.
	Grace stages.Duration `json:"grace,omitempty" yaml:"grace,omitempty"`
	// Singleton skips a tick (recorded as "skipped") while any task of an earlier
	// run of the schedule is still in the queue, including one failed for good.
	Singleton bool `json:"singleton,omitempty" yaml:"singleton,omitempty"`
	// Paused creates the schedule paused.
	Paused bool `json:"paused,omitempty" yaml:"paused,omitempty"`
}

// DefaultScheduleGrace is how late a tick may be and still be enqueued when a
// schedule sets no Grace.
const DefaultScheduleGrace = time.Minute

// MinScheduleInterval is the shortest Every: each tick is a submission and a
// recorded run, and --every 1ms enqueued over a thousand runs in seconds. A
// cron expression, whose finest field is seconds, ticks no more often either.
const MinScheduleInterval = time.Second

// ErrInvalidSchedule is wrapped by every validation error of a schedule.
var ErrInvalidSchedule = errors.New("invalid schedule")

// cronParser accepts five fields, or six with seconds first, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// farFuture is next_run of a cron expression that never matches again (cron
// gives up after five years of searching), and the latest next_run of an
// interval; the schedule then simply stays idle. Every dialect stores times up
// to the year 9999 only (SQLite's text sorts and parses with four-digit years).
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// tickSpec computes ticks. Implementations are pure: the times they are given
// come from the database.
type tickSpec interface {
	// next is the first tick strictly after the tick t.
	next(t time.Time) time.Time
	// atOrAfter is the first tick at or after t.
	atOrAfter(t time.Time) time.Time
}

// intervalSpec ticks every iv from anchor (a tick, normally the stored next_run).
type intervalSpec struct {
	iv     time.Duration
	anchor time.Time
}

func (i intervalSpec) next(t time.Time) time.Time {
	if n := t.Add(i.iv); n.Before(farFuture) {
		return n
	}
	return farFuture
}

func (i intervalSpec) atOrAfter(t time.Time) time.Time {
	a := i.anchor
	if !t.After(a) {
		return a
	}
	// t.Sub saturates at about 292 years, and the ceiling below must not
	// overflow either: from an anchor further back, first move it forward by
	// whole intervals, in strides of at most half that span.
	const stride = time.Duration(math.MaxInt64 / 2)
	for t.Sub(a) > stride {
		a = a.Add(max(stride/i.iv, 1) * i.iv)
	}
	gap := t.Sub(a)
	n := gap / i.iv // ceiling, without stepping tick by tick
	if gap%i.iv != 0 {
		n++
	}
	return i.next(a.Add((n - 1) * i.iv))
}

// parseCron parses a cron expression in a zone ("" for UTC) and checks that it
// has a next tick.
func parseCron(expr, zone string) (cron.Schedule, string, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		if zone != "" {
			return nil, "", fmt.Errorf("%w: cron %q names its zone and time_zone %q names another; give one", ErrInvalidSchedule, expr, zone)
		}
		if !strings.Contains(expr, " ") { // cron's parser would index past the end
			return nil, "", fmt.Errorf("%w: cron %q has a zone but no fields", ErrInvalidSchedule, expr)
		}
	} else {
		if zone == "" {
			zone = "UTC"
		}
		expr = "CRON_TZ=" + zone + " " + expr
	}
	if strings.Contains(expr, "@every") {
		return nil, "", fmt.Errorf("%w: cron %q: use an interval (--every) instead of @every", ErrInvalidSchedule, expr)
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, "", fmt.Errorf("%w: cron %q: %v", ErrInvalidSchedule, expr, err)
	}
	if s.Next(time.Now()).IsZero() {
		return nil, "", fmt.Errorf("%w: cron %q never matches", ErrInvalidSchedule, expr)
	}
	return s, expr, nil
}

// specOf builds the tick computation of a stored schedule.
func specOf(s dialect.ScheduleInfo) (tickSpec, error) {
	if s.Cron != "" {
		c, _, err := parseCron(s.Cron, "")
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", s.Name, err)
		}
		return cronSpec{c}, nil
	}
	if s.Interval <= 0 {
		return nil, fmt.Errorf("schedule %q: %w: neither cron nor a positive interval", s.Name, ErrInvalidSchedule)
	}
	return intervalSpec{iv: s.Interval, anchor: s.NextRun}, nil
}

// tickDecision is what one handled tick does.
type tickDecision struct {
	scheduledFor time.Time // the tick
	outcome      string    // dialect.RunEnqueued, RunCaughtUp or RunMissed
	enqueue      bool
	next         time.Time // next_run afterwards
}

// decideTick handles the due tick s.NextRun at the database's now: on time
// (within the grace) it is enqueued and next_run moves to the following tick;
// later than that, the missed-tick policy applies and next_run moves to the first
// tick that is still on time.
func decideTick(s dialect.ScheduleInfo, spec tickSpec, now time.Time) tickDecision {
	t0 := s.NextRun
	threshold := now.Add(-s.Grace)
	if !t0.Before(threshold) {
		return tickDecision{scheduledFor: t0, outcome: dialect.RunEnqueued, enqueue: true, next: spec.next(t0)}
	}
	d := tickDecision{scheduledFor: t0, outcome: dialect.RunMissed, next: spec.atOrAfter(threshold)}
	if s.Missed == dialect.MissedOnce {
		d.outcome, d.enqueue = dialect.RunCaughtUp, true
	}
	return d
}

// validate checks a schedule and returns the stored form of its cron expression.
func (s *Schedule) validate() (string, error) {
	if err := stages.ValidateName(s.Name); err != nil {
		return "", fmt.Errorf("%w: name: %v", ErrInvalidSchedule, err)
	}
	var expr string
	switch {
	case s.Cron != "" && s.Every != 0:
		return "", fmt.Errorf("%w: give either a cron expression or an interval, not both", ErrInvalidSchedule)
	case s.Cron != "":
		var err error
		if _, expr, err = parseCron(s.Cron, s.TimeZone); err != nil {
			return "", err
		}
		// Go reads the zone "Local" as the zone of the machine reading it:
		// workers in different zones would compute different ticks for one
		// schedule. (One stored before this check keeps running.)
		if z, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(expr, "CRON_TZ="), "TZ="), " "); z == "Local" {
			return "", fmt.Errorf("%w: cron %q: time zone Local is each worker's own; name the zone (Europe/Paris), or give none for UTC", ErrInvalidSchedule, expr)
		}
		if !s.Start.IsZero() {
			return "", fmt.Errorf("%w: start applies to interval schedules; cron expressions say when they start", ErrInvalidSchedule)
		}
	case s.Every < 0 || (s.Every == 0 && s.Cron == ""):
		if s.Every == 0 {
			return "", fmt.Errorf("%w: give a cron expression or a positive interval", ErrInvalidSchedule)
		}
		return "", fmt.Errorf("%w: interval must be positive, got %s", ErrInvalidSchedule, time.Duration(s.Every))
	case time.Duration(s.Every) < MinScheduleInterval:
		return "", fmt.Errorf("%w: interval must be at least %s, got %s", ErrInvalidSchedule, MinScheduleInterval, time.Duration(s.Every))
	case s.TimeZone != "":
		return "", fmt.Errorf("%w: time_zone applies to cron expressions only", ErrInvalidSchedule)
	}
	if !s.Start.IsZero() && (s.Start.UTC().Year() < 1 || !s.Start.Before(farFuture)) {
		return "", fmt.Errorf("%w: start %s: give a time from the year 1 to before %s", ErrInvalidSchedule,
			s.Start.Format(time.RFC3339), farFuture.Format(time.DateOnly))
	}
	switch s.Missed {
	case "":
		s.Missed = dialect.MissedSkip
	case dialect.MissedSkip, dialect.MissedOnce:
	default:
		return "", fmt.Errorf("%w: missed must be %q or %q, got %q", ErrInvalidSchedule, dialect.MissedSkip, dialect.MissedOnce, s.Missed)
	}
	if s.Grace < 0 {
		return "", fmt.Errorf("%w: grace must not be negative, got %s", ErrInvalidSchedule, time.Duration(s.Grace))
	}
	if s.Grace == 0 {
		s.Grace = stages.Duration(DefaultScheduleGrace)
	}
	if s.Plan.Process == "" {
		s.Plan.Process = s.Name
	}
	if err := ValidatePlan(s.Plan); err != nil {
		return "", fmt.Errorf("%w: plan: %w", ErrInvalidSchedule, err)
	}
	return expr, nil
}

// ScheduleAdd creates a schedule. Invalid input wraps ErrInvalidSchedule, a taken
// name dialect.ErrExists; either way nothing changes.
func (c *Client) ScheduleAdd(ctx context.Context, s Schedule) (dialect.ScheduleInfo, error) {
	expr, err := s.validate()
	if err != nil {
		return dialect.ScheduleInfo{}, err
	}
	plan, err := json.Marshal(s.Plan)
	if err != nil {
		return dialect.ScheduleInfo{}, fmt.Errorf("add schedule %q: encode plan: %w", s.Name, err)
	}
	tx, err := c.d.BeginTx(ctx)
	if err != nil {
		return dialect.ScheduleInfo{}, fmt.Errorf("add schedule %q: %w", s.Name, err)
	}
	defer tx.Rollback()
	// The first tick is computed from the database's now, read in this transaction.
	now, err := c.d.ClockNow(ctx, tx)
	if err != nil {
		return dialect.ScheduleInfo{}, fmt.Errorf("add schedule %q: %w", s.Name, err)
	}
	p := dialect.ScheduleCreateParams{
		Name: s.Name, Cron: expr, Interval: time.Duration(s.Every), Plan: string(plan), Missed: s.Missed,
		Grace: time.Duration(s.Grace), Singleton: s.Singleton, Paused: s.Paused,
	}
	switch {
	case expr != "":
		c, _, _ := parseCron(expr, "")
		p.NextRun = cronSpec{c}.atOrAfter(now)
	case !s.Start.IsZero():
		p.NextRun = s.Start
	default:
		p.NextRun = now.Add(time.Duration(s.Every))
	}
	if _, err := c.d.ScheduleCreate(ctx, tx, p); err != nil {
		return dialect.ScheduleInfo{}, err
	}
	if err := tx.Commit(); err != nil {
		return dialect.ScheduleInfo{}, fmt.Errorf("add schedule %q: commit: %w", s.Name, err)
	}
	list, err := c.d.ScheduleList(ctx, dialect.ScheduleFilter{Name: s.Name})
	if err != nil || len(list) == 0 {
		return dialect.ScheduleInfo{Name: s.Name, NextRun: p.NextRun}, err
	}
	return list[0], nil
}

// Schedules lists schedules by name; name "" lists all.
func (c *Client) Schedules(ctx context.Context, name string) ([]dialect.ScheduleInfo, error) {
	return c.d.ScheduleList(ctx, dialect.ScheduleFilter{Name: name})
}

// ScheduleRuns reads the run history of a schedule, oldest first (limit 0: all
// that is kept).
func (c *Client) ScheduleRuns(ctx context.Context, name string, limit int) ([]dialect.ScheduleRun, error) {
	return c.d.ScheduleRunList(ctx, dialect.ScheduleRunFilter{Name: name, Limit: limit})
}

// SchedulePause stops a schedule's ticks; dialect.ErrNotFound when unknown.
// Ticks that pass while it is paused are missed ticks when it resumes.
func (c *Client) SchedulePause(ctx context.Context, name string) error {
	return c.d.ScheduleSetPaused(ctx, dialect.SchedulePauseParams{Name: name, Paused: true})
}

// ScheduleResume restarts a paused schedule; dialect.ErrNotFound when unknown.
func (c *Client) ScheduleResume(ctx context.Context, name string) error {
	return c.d.ScheduleSetPaused(ctx, dialect.SchedulePauseParams{Name: name, Paused: false})
}

// ScheduleDelete removes a schedule; its runs already enqueued stay.
func (c *Client) ScheduleDelete(ctx context.Context, name string) error {
	return c.d.ScheduleDelete(ctx, name)
}

// ScheduleRunNow enqueues one run of the schedule at once, as a "manual" run
// whose tick is the database's now, leaving its next tick alone. It ignores
// Singleton and Paused: an operator asked for it.
func (c *Client) ScheduleRunNow(ctx context.Context, name, workerID string) (Result, error) {
	// A run recorded at the very same instant (a tick fired then) holds the
	// run history's key for it; the database's now moves on by the next try.
	for try := 1; ; try++ {
		res, err := c.runNow(ctx, name, workerID)
		if !errors.Is(err, dialect.ErrTickRecorded) || try == 3 {
			return res, err
		}
		select { // past SQLite's millisecond clock
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (c *Client) runNow(ctx context.Context, name, workerID string) (Result, error) {
	tx, err := c.d.BeginTx(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("run schedule %q now: %w", name, err)
	}
	defer tx.Rollback()
	s, now, err := c.d.ScheduleLock(ctx, tx, name)
	if err != nil {
		return Result{}, err
	}
	res, err := c.fireTx(ctx, tx, s, dialect.ScheduleFireParams{
		ScheduleID: s.ID, ScheduleName: s.Name, WorkerID: workerID, ScheduledFor: now, Outcome: dialect.RunManual,
	}, true)
	if err != nil {
		return Result{}, err
	}
	if err := tx.Commit(); err != nil {
		return Result{}, fmt.Errorf("run schedule %q now: commit: %w", name, err)
	}
	return res, nil
}

// decodePlan reads a schedule's stored plan and validates it.
func decodePlan(s dialect.ScheduleInfo) (stages.Plan, error) {
	var plan stages.Plan
	if err := json.Unmarshal([]byte(s.Plan), &plan); err != nil {
		return plan, fmt.Errorf("schedule %q: decode plan: %w", s.Name, err)
	}
	if err := ValidatePlan(plan); err != nil {
		return plan, fmt.Errorf("schedule %q: %w", s.Name, err)
	}
	return plan, nil
}

// fireTx records a handled tick in tx and, with enqueue, submits the schedule's
// plan through SubmitTx, the path of every other submission, in that same
// transaction: the tasks exist exactly when the tick is recorded.
func (c *Client) fireTx(ctx context.Context, tx *sql.Tx, s dialect.ScheduleInfo, fp dialect.ScheduleFireParams, enqueue bool) (Result, error) {
	var res Result
	if enqueue {
		plan, err := decodePlan(s)
		if err != nil {
			return res, err
		}
		if res, err = c.SubmitTx(ctx, tx, plan); err != nil {
			return res, submitError{fmt.Errorf("schedule %q: %w", s.Name, err)}
		}
		fp.ProcessID, fp.TaskIDs = res.ProcessID, res.TaskIDs
	}
	if err := c.d.ScheduleFire(ctx, tx, fp); err != nil {
		return Result{}, err
	}
	return res, nil
}

// submitError marks a failure to enqueue a tick's run (as opposed to recording
// the tick), which the scheduler may set aside rather than retry for ever.
type submitError struct{ err error }

func (e submitError) Error() string { return e.err.Error() }
func (e submitError) Unwrap() error { return e.err }
