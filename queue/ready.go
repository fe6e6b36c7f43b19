package queue

import "errors"

// A worker's phase, for Ready: it claims only while running and healthy.
const (
	phaseStarting int32 = iota // registering (Run not yet past register)
	phaseRunning               // claiming, while its heartbeats land
	phaseStopping              // claiming ended; running tasks drain
	phaseStopped               // Run returned
)

// Why a worker is not ready; Ready wraps one of them.
var (
	ErrStarting    = errors.New("starting: not yet registered with the queue database")
	ErrUnreachable = errors.New("heartbeats do not reach the queue database: claiming stopped, running tasks cancelled until one lands")
	ErrStopping    = errors.New("stopping: claims no more, running tasks drain")
	ErrStopped     = errors.New("stopped")
)

// Ready is nil while the worker claims tasks: it has registered, its
// heartbeats reach the database and it has not begun to stop. Otherwise it
// says why not (ErrStarting, ErrUnreachable, ErrStopping, ErrStopped). It is
// the worker's readiness probe (the worker command's /readyz); it reads
// state the worker keeps anyway and never touches the database.
func (w *Worker) Ready() error {
	switch w.phase.Load() {
	case phaseStarting:
		return ErrStarting
	case phaseStopping:
		return ErrStopping
	case phaseStopped:
		return ErrStopped
	}
	if !w.healthy.Load() {
		return ErrUnreachable
	}
	return nil
}
