package admission_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
)

func TestSystemClock(t *testing.T) {
	var c admission.SystemClock
	prev := c.Now()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		now := c.Now()
		if now.Before(prev) {
			t.Fatalf("SystemClock went back: %v after %v", now, prev)
		}
		if d := time.Since(now); d < 0 || d > 50*time.Millisecond {
			t.Fatalf("SystemClock.Now() = %v; time.Now() is %v later", now, d)
		}
		if w := time.Now().Round(0).Sub(now.Round(0)); w < -time.Millisecond || w > time.Second {
			t.Fatalf("wall time %v off by %v", now, w)
		}
		prev = now
		time.Sleep(10 * time.Millisecond)
	}
}
