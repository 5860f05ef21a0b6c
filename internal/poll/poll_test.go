package poll_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
)

// logger keeps what Until logs.
type logger struct{ lines []string }

func (l *logger) Helper() {}

func (l *logger) Logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// TestUntil: Until returns once the condition holds, however late, fails
// nothing on the way, and logs once per patience while it waits.
func TestUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ready atomic.Bool
		time.AfterFunc(2500*time.Millisecond, func() { ready.Store(true) })
		l := &logger{}
		took := poll.Until(l, time.Second, "ready", ready.Load)
		if took < 2500*time.Millisecond || took > 2500*time.Millisecond+time.Millisecond {
			t.Errorf("Until returned after %v; want 2.5s, the condition's time, to the millisecond", took)
		}
		want := "still waiting for ready after 1s|still waiting for ready after 2s"
		if got := strings.Join(l.lines, "|"); got != want {
			t.Errorf("logged %q; want %q", got, want)
		}
		l.lines = nil
		if took := poll.Until(l, time.Second, "at once", func() bool { return true }); took != 0 || l.lines != nil {
			t.Errorf("a condition true at once: Until took %v and logged %q; want 0 and nothing", took, l.lines)
		}
	})
}

func ExampleUntil() {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	poll.Until(&logger{}, time.Second, "three increments", func() bool { return n.Load() == 3 })
	fmt.Println(n.Load())
	// Output: 3
}
