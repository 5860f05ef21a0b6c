// Package vclock is a virtual clock for package admission: its time moves
// only when told to. The replay engine (package shadow) runs request logs
// on it, and package admissiontest gives it to tests as admissiontest.Clock;
// it lives here so that programs linking the replay engine do not link the
// test kit.
package vclock

import (
	"sort"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// Clock is a virtual admission.Clock whose time moves only when told to.
// Functions scheduled with AfterFunc run, in order of their due time, when
// Advance or Set passes it. It is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers []*timer
}

type timer struct {
	c   *Clock
	at  time.Time
	seq int
	f   func()
}

// New returns a virtual clock reading t.
func New(t time.Time) *Clock { return &Clock{now: t} }

var _ admission.Clock = (*Clock)(nil)

// Now returns the virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when the clock reaches now+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) admission.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop implements admission.Timer.
func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock forward by d, running due functions on the way.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never backwards), running due functions, each
// with the clock reading its due time.
func (c *Clock) Set(t time.Time) {
	for c.Step(t) {
	}
}

// Step runs the first function due by t, with the clock moved to its due
// time, and reports whether there was one; when there was none it moves
// the clock to t (never backwards). A caller that must see each
// function's effects before the next runs steps instead of setting.
func (c *Clock) Step(t time.Time) bool {
	c.mu.Lock()
	sort.SliceStable(c.timers, func(i, j int) bool {
		if !c.timers[i].at.Equal(c.timers[j].at) {
			return c.timers[i].at.Before(c.timers[j].at)
		}
		return c.timers[i].seq < c.timers[j].seq
	})
	if len(c.timers) == 0 || c.timers[0].at.After(t) {
		if t.After(c.now) {
			c.now = t
		}
		c.mu.Unlock()
		return false
	}
	next := c.timers[0]
	c.timers = c.timers[1:]
	if next.at.After(c.now) {
		c.now = next.at
	}
	c.mu.Unlock()
	next.f()
	return true
}

// Pending returns the number of scheduled functions not yet run.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
