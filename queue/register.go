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

// routinesKept is the check after registering, with the install again that
// Migrate allows when the version is gone (not when it is there from other
// sources: installing cannot cure that).
func (w *Worker) routinesKept(ctx context.Context) error {
	cctx, cancel := w.stmtCtx(ctx)
	err := w.stmtErr(cctx, ctx, "check routines", migrations.CheckRoutines(cctx, w.d))
	cancel()
	if err == nil || !w.c.migrate || !errors.Is(err, routines.ErrNotInstalled) {
		return err
	}
	w.log.Warn().Err(err).Msg("routines pruned while the worker started; installing them again")
	if _, err := w.c.Migrate(ctx); err != nil {
		return fmt.Errorf("install routines again after a prune: %w", err)
	}
	return nil
}
