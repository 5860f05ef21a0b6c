package upstream

import (
	"cmp"
	"errors"
	"math"

	"github.com/sluicehq/sluice/admission/limits"
)

// Defaults of Accounting's zero fields.
const (
	DefaultRatioInitial = 1
	DefaultRatioMin     = 0.5
	DefaultRatioMax     = 4
	DefaultRatioWindow  = 50
	// ratioSamples is how many answers a group's ratio needs before it
	// replaces Initial.
	ratioSamples = 5
)

// Accounting configures how a Store learns the provider's accounting: a
// provider's limiter is not an exact tokenizer (OpenAI's estimates a
// request from its characters and max_tokens), so it charges a request
// more or less than the gateway's estimate. Each group learns the ratio
// of what the provider charged to what the gateway estimated, from the
// drop of the provider's remaining tokens between two reports (less the
// refill in between) against the estimates of the requests those
// reports answered (Report.Sent), averaged over about Window answers and
// bounded to [Min, Max]; a 429 about tokens whose remaining figure is
// above what the gateway reserved raises it at once (the provider
// charges more than that remaining), unless the same answer says its
// requests budget is the one exhausted. A token policy on the store then
// reserves its estimate times the ratio, in the provider's units, against
// the learned and the static budget; the policies on other stores (the
// tenants') still count the estimate.
//
// Until a group has learned (5 answers), and for a provider that
// publishes no token headers, the ratio is Initial: set it, and Min, to
// what the provider is known to count over the gateway's estimate (1.3
// is about bytes/4 over a BPE count of English prose).
type Accounting struct {
	// Initial is the ratio before anything is learned;
	// DefaultRatioInitial (1) when zero.
	Initial float64
	// Min and Max bound the learned ratio; DefaultRatioMin (0.5) and
	// DefaultRatioMax (4) when zero.
	Min, Max float64
	// Window is the number of answers the ratio averages over;
	// DefaultRatioWindow when zero.
	Window int
}

// normalize checks a and applies its defaults.
func (a *Accounting) normalize() error {
	a.Initial, a.Min, a.Max = cmp.Or(a.Initial, DefaultRatioInitial), cmp.Or(a.Min, DefaultRatioMin), cmp.Or(a.Max, DefaultRatioMax)
	a.Window = cmp.Or(a.Window, DefaultRatioWindow)
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"Initial", a.Initial}, {"Min", a.Min}, {"Max", a.Max}} {
		if !(f.v >= 0.01 && f.v <= 100) { // NaN too
			errs = append(errs, errors.New("upstream: Accounting."+f.name+" must be in [0.01, 100]"))
		}
	}
	if a.Min > a.Max || a.Initial < a.Min || a.Initial > a.Max {
		errs = append(errs, errors.New("upstream: Accounting must have Min <= Initial <= Max"))
	}
	if a.Window < 0 || a.Window > 1_000_000 {
		errs = append(errs, errors.New("upstream: Accounting.Window must be in [0, 1000000]"))
	}
	return errors.Join(errs...)
}

// accounting is what one group learned about the provider's accounting.
type accounting struct {
	charged, sent float64 // decayed sums: what the provider charged, what was sent
	samples       int
	ratio         float64 // 0 until learned
	// The last token report, as the provider sent it.
	at        int64
	remaining float64
	limit     float64
	perNs     float64
	hasLast   bool
}

// ratioOf returns the ratio to reserve at.
func (a *accounting) ratioOf(cfg *Accounting) float64 {
	if a.ratio == 0 {
		return cfg.Initial
	}
	return a.ratio
}

// learn takes one token report f received at now in answer to a request
// the gateway estimated at sent tokens, accepted by the provider or
// refused (throttled); tokensRefused says the refusal may be about tokens
// (the requests budget was not the one exhausted).
func (a *accounting) learn(cfg *Accounting, f Figure, now int64, sent int64, throttled, tokensRefused bool) {
	if !f.HasRemaining {
		return
	}
	rem := float64(f.Remaining)
	if a.hasLast && now >= a.at && sent > 0 {
		expected := a.remaining + a.perNs*float64(now-a.at)
		if a.limit > 0 {
			expected = min(expected, a.limit)
		}
		accepted := float64(sent)
		if throttled {
			accepted = 0 // refused, the request was not charged
		}
		decay := 1 - 1/float64(cfg.Window)
		a.charged = a.charged*decay + (expected - rem)
		a.sent = a.sent*decay + accepted
		if accepted > 0 {
			a.samples++
		}
		if a.samples >= ratioSamples && a.sent > 0 {
			a.ratio = min(max(a.charged/a.sent, cfg.Min), cfg.Max)
		}
	}
	if throttled && tokensRefused && sent > 0 && rem > 0 {
		// The provider refused a request it counts above rem.
		if low := rem / float64(sent); low > a.ratioOf(cfg) {
			a.ratio = min(low, cfg.Max)
			a.charged = a.sent * a.ratio
		}
	}
	a.at, a.remaining, a.hasLast = now, rem, true
	a.limit, a.perNs = 0, 0
	if f.HasLimit {
		a.limit = float64(f.Limit)
		if f.HasReset && f.Reset > 0 && f.Limit > f.Remaining {
			a.perNs = float64(f.Limit-f.Remaining) / float64(f.Reset)
		}
	}
}

// scale returns n in the provider's units at ratio r, rounded up, within
// [0, limits.MaxAmount] as every amount is.
func scale(n int64, r float64) int64 {
	if r == 1 || n <= 0 {
		return n
	}
	return int64(min(math.Ceil(float64(n)*r), float64(limits.MaxAmount)))
}

// Ratio returns the ratio of the provider's token count to the gateway's
// estimate that the store's token policies reserve at in group: the
// learned one, or Accounting.Initial before it is learned.
func (s *Store) Ratio(group string) float64 {
	g := s.lookup(group)
	if g == nil {
		return s.cfg.Accounting.Initial
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.acct.ratioOf(&s.cfg.Accounting)
}
