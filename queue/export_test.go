package queue

import "time"

// SetBufferMaxWait lets a test hold a prefetch buffer for longer; the returned
// function restores the default.
func SetBufferMaxWait(d time.Duration) (restore func()) {
	old := bufferMaxWait
	bufferMaxWait = d
	return func() { bufferMaxWait = old }
}
