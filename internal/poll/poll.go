// Package poll waits, in tests, for a condition that other goroutines or
// processes make true (a server's answer, a counter reaching a figure),
// with no wall-clock bound: how long a busy machine takes is not what a
// test asserts, so a deadline on such a wait only fails tests on loaded
// machines. A condition that never holds is ended by go test's -timeout,
// whose report shows every goroutine, the waiting one among them. Timing
// that is the subject of a test belongs on a fake clock (package
// admissiontest) or in a testing/synctest bubble, not here.
package poll

import "time"

// TB is the part of testing.TB that Until uses.
type TB interface {
	Helper()
	Logf(format string, args ...any)
}

// interval is the pause between two calls of a condition.
const interval = time.Millisecond

// Until calls cond until it returns true, pausing a millisecond between
// calls, and returns how long that took. It sets no deadline. Once
// patience has passed, and every patience after, it logs that it is
// still waiting for what (a name for cond), so that a slow wait shows in
// the test's output.
func Until(tb TB, patience time.Duration, what string, cond func() bool) time.Duration {
	tb.Helper()
	start := time.Now()
	next := patience
	for !cond() {
		if d := time.Since(start); patience > 0 && d >= next {
			tb.Logf("still waiting for %s after %v", what, d.Round(time.Millisecond))
			next += patience
		}
		time.Sleep(interval)
	}
	return time.Since(start)
}
