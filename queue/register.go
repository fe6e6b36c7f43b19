package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/stageq/stageq/dialect"
	"github.com/stageq/stageq/migrations"
	"github.com/stageq/stageq/routines"
)

// register records the worker in Workers, then checks its routine version
// again. A prune (`queuectl migrate prune-routines`) drops the versions no live
// registered worker calls, so one that ran between the client's check at Open
// and this registration has dropped this worker's: that is found here, before
// the first claim, and a client opened with Migrate installs the version
// again. From the registration on, a prune counts the worker for as long as
// it heartbeats within the prune's live window. The check reads under the lock
// a prune holds (routines.Check), so it cannot miss one in progress.
//
// When the check fails the worker is marked stopped again: it claimed nothing.
func (w *Worker) register(ctx context.Context, info dialect.WorkerInfo) error {
	rctx, cancel := w.stmtCtx(ctx)
	err := w.stmtErr(rctx, ctx, "register", w.d.WorkerRegister(rctx, info))
	cancel()
	if err != nil {
		return err
	}
	if err := w.routinesKept(ctx); err != nil {
		sctx, cancel := w.stmtCtx(context.WithoutCancel(ctx))
		defer cancel()
		if serr := w.d.WorkerStop(sctx, w.cfg.ID); serr != nil {
			w.log.Warn().Err(serr).Msg("could not mark worker stopped")
		}
		return err
	}
	return nil
}

// routinesKept is the check after registering (and after a failed claim),
// with the install again that Migrate allows when the version is gone (not
// when it is there from other sources: installing cannot cure that).
func (w *Worker) routinesKept(ctx context.Context) error {
	cctx, cancel := w.stmtCtx(ctx)
	err := w.stmtErr(cctx, ctx, "check routines", migrations.CheckRoutines(cctx, w.d))
	cancel()
	if err == nil || w.reinstall == nil || !errors.Is(err, routines.ErrNotInstalled) {
		return err
	}
	w.log.Warn().Err(err).Msg("routines pruned; installing them again")
	if _, err := w.reinstall(ctx); err != nil {
		return fmt.Errorf("install routines again after a prune: %w", err)
	}
	return nil
}

// routinesGoneAfter decides, after a claim failed calling a routine the
// database lacks (dialect.RoutineMissing), whether the worker's routine
// version is gone: a prune judged the worker dead (its heartbeats lapsed past
// the prune's live window) and dropped it. Then no claim can succeed again,
// and the error it returns ends the worker instead of a loop of failing
// claims, unless its client was opened with Migrate, which installs the
// version again. Other failures (an outage, a timeout) say nothing about the
// routines and are not checked. The check reads the registry of installed
// versions, which a prune keeps true; a namespace dropped by hand behind its
// back is not seen.
func (w *Worker) routinesGoneAfter(ctx context.Context, claimErr error) error {
	if !dialect.RoutineMissing(claimErr) {
		return nil
	}
	err := w.routinesKept(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, migrations.ErrSchemaMismatch):
		return fmt.Errorf("worker: routines gone while running: %w", err)
	default:
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("could not check the routines after a failed claim")
		}
		return nil
	}
}
