package queue

import "time"

// SetBufferMaxWait lets a test hold a prefetch buffer for longer; the returned
// function restores the default.
func SetBufferMaxWait(d time.Duration) (restore func()) {
	old := bufferMaxWait
	bufferMaxWait = d
	return func() { bufferMaxWait = old }
}

// WrappedUp is closed once w's goroutines that record attempts' ends have
// stopped (after Run returns, when its shutdown left a task running).
func WrappedUp(w *Worker) <-chan struct{} { return w.wrappedUp }
