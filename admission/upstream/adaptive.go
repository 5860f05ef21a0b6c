package upstream

import (
	"cmp"
	"context"
	"errors"
	"math"
	"time"

	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// Defaults of Adaptive's zero fields.
const (
	DefaultAdaptiveMin       = 1
	DefaultAdaptiveTolerance = 1.5
	DefaultAdaptiveSmoothing = 0.2
	DefaultAdaptiveWindow    = 600
	// adaptiveShort is the number of samples the short-term time to
	// first byte averages over.
	adaptiveShort = 10
)

// Adaptive configures the adaptive concurrency of a Store's concurrency
// policies: each group's cap moves between Min and the policy's own limit
// with the provider's time to first byte, as the gradient limit of
// Netflix's concurrency-limits (Gradient2) does. The short-term average
// of the time to first byte (the last 10 samples) is compared with the
// long-term one (Window samples): while the short one stays within
// Tolerance times the long one the cap grows by about its square root a
// sample (only while at least half of it is in use: a cap nobody reaches
// says nothing), and when the provider slows down beyond that it shrinks
// in proportion, by at most half a sample; each new cap is smoothed
// (Smoothing of the new value, the rest the old). The long-term average
// forgets faster while it is more than twice the short one, so that the
// cap recovers when the provider does rather than when the long average
// catches up.
type Adaptive struct {
	// Min is the lowest the cap falls; DefaultAdaptiveMin when zero.
	Min int64
	// Tolerance is how much slower than usual the provider may answer
	// before the cap shrinks, at least 1; DefaultAdaptiveTolerance when
	// zero.
	Tolerance float64
	// Smoothing is the weight of each new cap, in (0, 1];
	// DefaultAdaptiveSmoothing when zero.
	Smoothing float64
	// Window is the number of samples of the long-term average;
	// DefaultAdaptiveWindow when zero.
	Window int
}

// normalize checks a and applies its defaults.
func (a *Adaptive) normalize() error {
	var errs []error
	if a.Min < 0 {
		errs = append(errs, errors.New("upstream: Adaptive.Min must be >= 0"))
	}
	if a.Tolerance != 0 && (a.Tolerance < 1 || a.Tolerance > 100 || math.IsNaN(a.Tolerance)) {
		errs = append(errs, errors.New("upstream: Adaptive.Tolerance must be in [1, 100]"))
	}
	if a.Smoothing != 0 && (a.Smoothing <= 0 || a.Smoothing > 1 || math.IsNaN(a.Smoothing)) {
		errs = append(errs, errors.New("upstream: Adaptive.Smoothing must be in (0, 1]"))
	}
	if a.Window < 0 || a.Window > 1_000_000 {
		errs = append(errs, errors.New("upstream: Adaptive.Window must be in [0, 1000000]"))
	}
	a.Min, a.Window = cmp.Or(a.Min, DefaultAdaptiveMin), cmp.Or(a.Window, DefaultAdaptiveWindow)
	a.Tolerance, a.Smoothing = cmp.Or(a.Tolerance, DefaultAdaptiveTolerance), cmp.Or(a.Smoothing, DefaultAdaptiveSmoothing)
	return errors.Join(errs...)
}

// gradient is one group's adaptive cap. Its zero value knows nothing:
// the policy's own limit applies until the first sample.
type gradient struct {
	limit    float64 // the current cap; 0 before the first sample
	max      int64   // the policy's own limit, as last seen
	inflight int64   // in flight at the last admission
	short    float64 // short-term average time to first byte, ns
	long     float64 // long-term average, ns
}

// capOf returns the cap for a policy whose own limit is max.
func (gr *gradient) capOf(max int64) int64 {
	gr.max = max
	if gr.limit == 0 {
		return max
	}
	return min(int64(gr.limit), max)
}

// sample moves the cap with one time to first byte.
func (gr *gradient) sample(a *Adaptive, ttfb time.Duration) {
	rtt := float64(ttfb)
	if gr.max == 0 || rtt <= 0 {
		return // no concurrency policy has asked yet, or nothing measured
	}
	if gr.limit == 0 {
		gr.limit, gr.short, gr.long = float64(gr.max), rtt, rtt
		return
	}
	gr.short += (rtt - gr.short) / adaptiveShort
	gr.long += (rtt - gr.long) / float64(a.Window)
	if gr.long > 2*gr.short {
		// The provider is fast again: forget the slow past sooner.
		gr.long *= 0.95
	}
	g := max(0.5, min(1, a.Tolerance*gr.long/gr.short))
	next := gr.limit * g
	if g == 1 {
		if float64(gr.inflight) < gr.limit/2 {
			return // the cap is not what limits: it says nothing
		}
		next += math.Sqrt(gr.limit)
	}
	gr.limit = gr.limit*(1-a.Smoothing) + next*a.Smoothing
	gr.limit = max(float64(a.Min), min(gr.limit, float64(gr.max)))
}

// constrained reports whether the cap is below the policy's limit: the
// group then holds what it learned.
func (gr *gradient) constrained() bool {
	return gr.limit > 0 && int64(gr.limit) < gr.max
}

// adaptiveAcquire acquires a permit of a concurrency policy under the
// group's adaptive cap, which is never below the request's own amount
// (a request larger than the cap is not refused forever). Callers hold
// gr.mu.
func (l *limiter) adaptiveAcquire(ctx context.Context, gr *group, key string, lim *limits.Limit, n int64, now time.Time, g *backend.Grant) error {
	c := *lim
	c.Amount = max(gr.grad.capOf(lim.Amount), min(n, lim.Amount))
	if err := l.inner.Acquire(ctx, key, &c, n, now, g); err != nil {
		return err
	}
	gr.grad.inflight = c.Amount - g.Remaining
	if g.OK {
		gr.grad.inflight = max(gr.grad.inflight, n)
	}
	return nil
}

// ObserveLatency feeds the adaptive concurrency of group (Config.Adaptive)
// with the time to first byte of one provider response, measured from
// the moment the request was sent to its response headers. It reports
// whether the sample was kept: without Config.Adaptive, for a group
// whose key is longer than 256 bytes, or for a new group when the table
// is full, it is not.
func (s *Store) ObserveLatency(group string, ttfb time.Duration, now time.Time) bool {
	if s.cfg.Adaptive == nil || len(group) > maxGroupKey || ttfb <= 0 {
		return false
	}
	g := s.group(group, now.UnixNano())
	if g == nil {
		return false
	}
	g.mu.Lock()
	g.grad.sample(s.cfg.Adaptive, min(ttfb, time.Hour))
	g.mu.Unlock()
	return true
}
