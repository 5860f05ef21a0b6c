package promtest

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// deadlineTB is a testing.TB whose go test -timeout ends at deadline.
type deadlineTB struct {
	testing.TB
	deadline time.Time
}

func (d deadlineTB) Deadline() (time.Time, bool) { return d.deadline, true }

// TestRounds: Rounds returns nil at the first round that passes, two
// seconds apart; a round still failing a minute before the test's
// deadline is returned, not retried until the timeout's panic.
func TestRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// No Deadline: t's would panic in a bubble.
		start, calls := time.Now(), 0
		got := Rounds(struct{ testing.TB }{t}, func() []string {
			if calls++; calls < 3 {
				return []string{"not yet"}
			}
			return nil
		})
		if got != nil || calls != 3 || time.Since(start) != 3*roundEvery {
			t.Errorf("passing at the third round: returned %q after %d rounds and %v; want nil, 3 and %v", got, calls, time.Since(start), 3*roundEvery)
		}

		start, calls = time.Now(), 0
		tb := deadlineTB{TB: t, deadline: start.Add(10 * time.Minute)}
		got = Rounds(tb, func() []string { calls++; return []string{"never", "passes"} })
		if took := time.Since(start); !slices.Equal(got, []string{"never", "passes"}) || took != 9*time.Minute+roundEvery {
			t.Errorf("never passing: returned %q after %v (%d rounds); want its failures once within %v of the deadline, after %v",
				got, took, calls, deadlineMargin, 9*time.Minute+roundEvery)
		}
	})
}
