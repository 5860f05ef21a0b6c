package promtest

import (
	"testing"
	"time"
)

// roundEvery is the pause before each round of Rounds: two scrapes and
// rule evaluations at the default one-second interval.
const roundEvery = 2 * time.Second

// deadlineMargin is how long before go test's -timeout Rounds gives up,
// so that the test reports the last round's failures itself rather than
// being ended by the timeout's panic, which prints no test's log.
const deadlineMargin = time.Minute

// Rounds calls round every two seconds, as scrapes and rule evaluations
// land, until it reports no failure, and returns the last round's
// failures: none when a round passed. Prometheus is a real peer whose
// pace is the machine's, so no wall-clock bound of its own decides the
// outcome: rounds go on until a minute before go test's -timeout (the
// test's Deadline), and only then are a failing round's failures
// returned for the test to report.
func Rounds(t testing.TB, round func() []string) []string {
	t.Helper()
	dl, bounded := t.(interface{ Deadline() (time.Time, bool) })
	for {
		time.Sleep(roundEvery)
		failures := round()
		if len(failures) == 0 {
			return nil
		}
		if bounded {
			if d, ok := dl.Deadline(); ok && time.Until(d) < deadlineMargin {
				return failures
			}
		}
	}
}
