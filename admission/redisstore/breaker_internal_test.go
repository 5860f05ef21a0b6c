package redisstore

import (
	"testing"
	"time"
)

// TestBreakerRatio: the breaker opens when half of the last 2×threshold
// round trips failed, never on a few failures among answers, and forgets
// the failures that opened it once a probe succeeds.
func TestBreakerRatio(t *testing.T) {
	cases := []struct {
		name string
		// trips are round trips in order: 'o' answered, 'x' failed, 'p'
		// a probe after the cooldown (allow must grant it) that answers.
		trips string
		open  bool
	}{
		{"no round trip", "", false},
		{"four failures", "xxxx", false},
		{"five failures", "xxxxx", true},
		{"five failures among answers", "oxoxoxoxox", true},
		{"four of the last ten", "xxxxooooooxoxoxox", false},
		{"failures shifted out by answers", "xxxxoooooooooooxxxx", false},
		{"one slow answer in a long run", "oooooooooooooooooooxoooooooooo", false},
		{"a probe's answer closes it and forgets", "xxxxxpxxxx", false},
		{"...until five fail again", "xxxxxpxxxxx", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var changes []bool
			b := newBreaker(DefaultBreakerFailures, time.Nanosecond, func(open bool) { changes = append(changes, open) })
			for i, r := range c.trips {
				switch r {
				case 'o':
					b.success()
				case 'x':
					b.failure()
				case 'p':
					for b.refusing() {
						time.Sleep(time.Microsecond) // a 1ns cooldown
					}
					if !b.allow() {
						t.Fatalf("trip %d: allow after the cooldown = false; want a probe", i)
					}
					b.success()
				}
			}
			if got := b.openUntil.Load() != 0; got != c.open {
				t.Fatalf("after %q: open = %v (changes %v); want %v", c.trips, got, changes, c.open)
			}
		})
	}
}
