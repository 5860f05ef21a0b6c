package admission

import "time"

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

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc calls time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
