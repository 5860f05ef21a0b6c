package admission

import (
	"sync/atomic"
	"time"
)

// A Clock tells the time and runs functions later. The controller reads it
// once per decision; queues use AfterFunc for timeouts and retries. Tests
// substitute a fake clock (see package admissiontest) or run inside a
// testing/synctest bubble with SystemClock.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// A Timer is a function scheduled by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the function from running; it reports whether it did.
	Stop() bool
}

// SystemClock is the real clock. Now reads only the monotonic clock and
// derives the wall time from an anchor taken with time.Now at most a
// second earlier: one clock read instead of the two time.Now makes (a
// third cheaper on common hardware), with the wall time at most a second's
// drift correction behind. Limits measure intervals, for which the
// monotonic clock is the right one; calendar quotas see the wall time.
type SystemClock struct{}

var clockAnchor atomic.Pointer[time.Time]

func init() {
	t := time.Now()
	clockAnchor.Store(&t)
}

// Now returns the current time, with a monotonic reading.
func (SystemClock) Now() time.Time {
	a := clockAnchor.Load()
	d := time.Since(*a) // monotonic only
	if d < 0 || d >= time.Second {
		t := time.Now()
		clockAnchor.Store(&t)
		return t
	}
	return a.Add(d)
}

// AfterFunc calls time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
