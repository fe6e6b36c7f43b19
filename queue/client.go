package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
	"github.com/stageq/stageq/stages"
)

// Config configures a Client.
type Config struct {
	// Migrate applies missing migrations when the client opens. Without it, Open
	// refuses a database whose schema version is not the one this binary expects.
	Migrate bool
	// Logger receives the library's logs; the zero value logs nothing.
	Logger zerolog.Logger
}

// Client enqueues tasks. It is safe for concurrent use.
type Client struct {
	d       dialect.Dialect
	log     zerolog.Logger
	migrate bool // Config.Migrate: a worker may install its routines again (register.go)
}

// Result names what a submission created.
type Result struct {
	ProcessID int64   `json:"process_id"`
	Process   string  `json:"process"`
	TaskIDs   []int64 `json:"task_ids"`
}

// Open connects to the queue database named by the DSN (sqlite://file.db,
// postgres://…, sqlserver://…) and checks (or, with cfg.Migrate, applies) its schema.
func Open(ctx context.Context, dsn string, cfg Config) (*Client, error) {
	d, err := dialect.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	c, err := New(ctx, d, cfg)
	if err != nil {
		d.Close()
		return nil, err
	}
	return c, nil
}

// New wraps an open dialect, checking or migrating its schema like Open.
func New(ctx context.Context, d dialect.Dialect, cfg Config) (*Client, error) {
	c := &Client{d: d, log: cfg.Logger, migrate: cfg.Migrate}
	if cfg.Migrate {
		if _, err := c.Migrate(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}
	if err := migrations.Check(ctx, d); err != nil {
		return nil, err
	}
	return c, nil
}

// Migrate applies the migrations the database lacks and returns its version.
func (c *Client) Migrate(ctx context.Context) (uint, error) {
	v, err := migrations.Up(ctx, c.d)
	if err != nil {
		return 0, err
	}
	c.log.Debug().Uint("version", v).Str("dialect", c.d.Name()).Msg("schema is current")
	return v, nil
}

// Dialect is the database behind the client, for the operator commands.
func (c *Client) Dialect() dialect.Dialect { return c.d }

// Close closes the database pool.
func (c *Client) Close() error { return c.d.Close() }

// Enqueue adds one task to a process ("" for the default process) at an order.
func (c *Client) Enqueue(ctx context.Context, process string, order int, t stages.Task) (Result, error) {
	return c.Submit(ctx, stages.Plan{Process: process, Stages: []stages.Stage{{Order: &order, Tasks: []stages.Task{t}}}})
}

// Submit adds a whole plan in one transaction: no worker sees part of it.
func (c *Client) Submit(ctx context.Context, p stages.Plan) (Result, error) {
	tx, err := c.d.BeginTx(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("submit: %w", err)
	}
	res, err := c.SubmitTx(ctx, tx, p)
	if err != nil {
		tx.Rollback()
		return Result{}, err
	}
	if err := tx.Commit(); err != nil {
		return Result{}, fmt.Errorf("submit: commit: %w", err)
	}
	return res, nil
}

// SubmitTx adds a plan inside the caller's own transaction on the queue database,
// so the tasks exist if and only if the caller's other writes commit.
//
// The submission locks its process's row until that transaction ends (the
// stage barrier is decided under it): other transactions that submit to the
// same process wait for this one, and so do stage advances and hand-backs of
// its tasks. Submit late in the transaction and keep it short; transactions
// that submit to several processes take them in an order of their own, and two
// that take the same two in opposite orders may deadlock (the database ends
// one: retry it). A plan without a process goes to "default", which every such
// transaction then shares.
func (c *Client) SubmitTx(ctx context.Context, tx *sql.Tx, p stages.Plan) (Result, error) {
	if tx == nil {
		return Result{}, errors.New("submit: SubmitTx needs the caller's transaction; Submit opens one of its own")
	}
	if err := ValidatePlan(p); err != nil {
		return Result{}, err
	}
	params := p.Resolve()
	sr, err := c.d.Submit(ctx, tx, params)
	if err != nil {
		return Result{}, fmt.Errorf("submit to process %q: %w", params.Process, err)
	}
	if params.Settings != nil { // the plan's priority / weight / max_parallel
		op, err := dialect.AsOperator(c.d)
		if err != nil {
			return Result{}, fmt.Errorf("submit to process %q: %w", params.Process, err)
		}
		if err := op.ProcessConfigure(ctx, tx, params.Process, *params.Settings); err != nil {
			return Result{}, fmt.Errorf("submit to process %q: %w", params.Process, err)
		}
	}
	c.log.Debug().Str("process", params.Process).Int("tasks", len(sr.TaskIDs)).Msg("submitted")
	return Result{ProcessID: sr.ProcessID, Process: params.Process, TaskIDs: sr.TaskIDs}, nil
}

// Logs reads the Logs trail, oldest first.
func (c *Client) Logs(ctx context.Context, f dialect.LogFilter) ([]dialect.LogEntry, error) {
	return c.d.LogList(ctx, f)
}

// Wait polls a process ("" for the default process, as in Enqueue) every
// interval (500 ms when 0) until it has ended, and returns it then: succeeded, cancelled (an operator removed what was
// left), or failed (a task failed for good; an operator's retry or discard
// can still move it on) once the other tasks of the failed one's stage have
// ended too (dialect.ProcessStatus.Settled). If ctx ends first it returns
// ctx's error with the process as last read; dialect.ErrNotFound for a
// process that does not exist. A database that restarts or is out of reach
// meanwhile (dialect.Unreachable) is waited out, with a warning in the
// client's log; any other error ends the wait.
func (c *Client) Wait(ctx context.Context, process string, interval time.Duration) (dialect.ProcessInfo, error) {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	if process == "" {
		process = dialect.DefaultProcess // where Enqueue and a plan without a process put their tasks
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last dialect.ProcessInfo // the last read, returned when ctx ends
	unreachable := false         // logged once an outage
	for {
		p, settled, err := c.poll(ctx, process)
		if err == nil && unreachable {
			unreachable = false
			c.log.Info().Str("process", process).Msg("wait: the database answers again")
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return last, fmt.Errorf("wait for process %q: %w", process, ctx.Err())
		case dialect.Unreachable(err):
			if !unreachable {
				unreachable = true
				c.log.Warn().Err(err).Str("process", process).Msg("wait: the database is out of reach; waiting on")
			}
		case err != nil:
			return p, fmt.Errorf("wait for process %q: %w", process, err)
		case settled:
			return p, nil
		default:
			last = p
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("wait for process %q: %w", process, ctx.Err())
		case <-t.C:
		}
	}
}

// poll reads the process once for Wait, and whether it has ended.
func (c *Client) poll(ctx context.Context, process string) (dialect.ProcessInfo, bool, error) {
	p, err := c.d.ProcessGet(ctx, process)
	if err != nil || p.State == dialect.ProcessActive {
		return p, false, err
	}
	settled, err := c.settled(ctx, p)
	return p, settled, err
}

// settled reads a process that has left the active state in full, for
// dialect.ProcessStatus.Settled: a failed one may still run tasks.
func (c *Client) settled(ctx context.Context, p dialect.ProcessInfo) (bool, error) {
	if p.State != dialect.ProcessFailed {
		return true, nil
	}
	op, err := dialect.AsOperator(c.d)
	if err != nil {
		return true, nil // nothing to read the stages with: the state must do
	}
	ps, err := op.ProcessList(ctx, dialect.ProcessFilter{Name: p.Name})
	if err != nil {
		return false, err
	}
	return len(ps) == 0 || ps[0].Settled(), nil
}
