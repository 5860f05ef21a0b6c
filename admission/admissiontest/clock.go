// Package admissiontest provides helpers for testing code built on package
// admission: a fake clock. The conformance suite of stores is package
// backend/backendtest.
package admissiontest

import (
	"time"

	"github.com/sluicehq/sluice/internal/vclock"
)

// Clock is a fake admission.Clock whose time moves only when told to:
// Now reads it, AfterFunc schedules a function, Advance and Set move it
// forward (never back), running the functions that fall due, each with the
// clock reading its due time and in order of due time, and Pending counts
// the functions not yet run. It is safe for concurrent use.
type Clock = vclock.Clock

// NewClock returns a fake clock reading t.
func NewClock(t time.Time) *Clock { return vclock.New(t) }
