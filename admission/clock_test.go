package admission_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// TestSystemClock reads the clock for a second and a half, across a
// renewal of its anchor: every reading lies between the time.Now readings
// taken just before and just after it (on the monotonic clock exactly, on
// the wall clock within the anchor's second of drift correction), however
// long the test is descheduled between two reads.
func TestSystemClock(t *testing.T) {
	var c admission.SystemClock
	prev := c.Now()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		before := time.Now()
		now := c.Now()
		after := time.Now()
		if now.Before(prev) {
			t.Fatalf("SystemClock went back: %v after %v", now, prev)
		}
		if now.Before(before) || now.After(after) {
			t.Fatalf("SystemClock.Now() = %v; want between %v and %v", now, before, after)
		}
		if wall := now.Round(0); wall.Before(before.Round(0).Add(-time.Second)) || wall.After(after.Round(0).Add(time.Millisecond)) {
			t.Fatalf("wall time %v; want between %v less a second and %v", wall, before.Round(0), after.Round(0))
		}
		prev = now
		time.Sleep(10 * time.Millisecond)
	}
}
