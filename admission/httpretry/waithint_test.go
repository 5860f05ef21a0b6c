package httpretry_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/httpretry"
)

// TestWaitHint: WaitHint waits a hint with the transport's jitter, and
// refuses at once a hint that would end past the deadline.
func TestWaitHint(t *testing.T) {
	now := time.Now().Add(time.Hour) // the deadlines are in the future on the real clock too
	var waits []time.Duration
	tr := &httpretry.Transport{
		Now:   func() time.Time { return now },
		Rand:  func() float64 { return 0.5 },
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil },
	}
	for _, tt := range []struct {
		left   time.Duration // until the deadline
		hint   time.Duration
		waited bool
		want   []time.Duration
	}{
		{time.Hour, time.Second, true, []time.Duration{2500 * time.Millisecond}}, // [1s, 4s] drawn at 0.5
		{2 * time.Second, time.Second, true, []time.Duration{1500*time.Millisecond - 1}},
		{500 * time.Millisecond, time.Second, false, nil},
	} {
		waits = nil
		ctx, cancel := context.WithDeadline(t.Context(), now.Add(tt.left))
		waited, err := tr.WaitHint(ctx, tt.hint)
		cancel()
		if waited != tt.waited || err != nil || len(waits) != len(tt.want) || (len(waits) == 1 && waits[0] != tt.want[0]) {
			t.Errorf("WaitHint(%v with %v left) = %v, %v after waits %v; want %v after %v", tt.hint, tt.left, waited, err, waits, tt.waited, tt.want)
		}
	}
}
