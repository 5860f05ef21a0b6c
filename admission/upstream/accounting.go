package upstream

import (
	"cmp"
	"context"
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

// A Ledger keeps the accounting the gateways of a fleet learn together
// about one provider account: a static store (WithStaticStore) that
// implements it, as the Redis store does, is where every group of the
// Store learns, so that the drop of the provider's remaining tokens
// between two reports, whichever replica received them, is set against
// what every replica sent (each replica learning alone would set the
// drop its neighbours' requests made against its own sends alone), and
// every replica reserves at the fleet's ratio from the first answer it
// receives. A replica whose ledger call fails learns that answer alone.
type Ledger interface {
	// LearnRatio applies s to the accounting kept under key (the
	// account and the group, see Config.Account) as the in-memory
	// accounting does, and returns the ratio learned: 0 while fewer
	// than 5 answers are, within [s.Min, s.Max] after.
	LearnRatio(ctx context.Context, key string, s RatioSample) (float64, error)
}

// RatioSample is one provider answer to learn the accounting from (see
// Accounting): its token report, the gateway's estimate of the request
// it answered, and the bounds the ratio is learned within. The instants
// are the gateways' (Report.Received), in unix nanoseconds.
type RatioSample struct {
	// At is when the answer arrived; Remaining the provider's remaining
	// tokens then; Limit its tokens limit (0: not reported); PerNs the
	// refill per nanosecond the report implies (0: none).
	At               int64
	Remaining, Limit float64
	PerNs            float64
	// Sent is the gateway's estimate of the request answered (0: not
	// known); Throttled says the provider refused it, TokensRefused that
	// its tokens budget may be what refused it.
	Sent                     int64
	Throttled, TokensRefused bool
	// Initial, Min, Max and Window are the Accounting in force.
	Initial, Min, Max float64
	Window            int
}

// sample returns the sample of one answer, received at now, whose token
// figure is f (it has a remaining figure), to a request estimated at
// sent tokens.
func (cfg *Accounting) sample(f Figure, now, sent int64, throttled, tokensRefused bool) RatioSample {
	x := RatioSample{At: now, Remaining: float64(f.Remaining), Sent: sent, Throttled: throttled, TokensRefused: tokensRefused,
		Initial: cfg.Initial, Min: cfg.Min, Max: cfg.Max, Window: cfg.Window}
	if f.HasLimit {
		x.Limit = float64(f.Limit)
		if f.HasReset && f.Reset > 0 && f.Limit > f.Remaining {
			x.PerNs = float64(f.Limit-f.Remaining) / float64(f.Reset)
		}
	}
	return x
}

// accounting is what one group learned about the provider's accounting.
type accounting struct {
	charged, sent float64 // decayed sums: what the provider charged, what was sent
	samples       int
	ratio         float64 // 0 until learned
	// The latest token report, as the provider sent it.
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

// learn takes one answer's sample x. The drop of the provider's
// remaining tokens since the latest report (less the refill in between)
// is what it charged; an answer older than the latest report teaches
// nothing and is not kept (answers of several replicas arrive in any
// order). A ledger's script (the Redis store's) does the same.
func (a *accounting) learn(x RatioSample) {
	if a.hasLast && x.At < a.at {
		return
	}
	if a.hasLast && x.Sent > 0 {
		expected := a.remaining + a.perNs*float64(x.At-a.at)
		if a.limit > 0 {
			expected = min(expected, a.limit)
		}
		accepted := float64(x.Sent)
		if x.Throttled {
			accepted = 0 // refused, the request was not charged
		}
		decay := 1 - 1/float64(x.Window)
		a.charged = a.charged*decay + (expected - x.Remaining)
		a.sent = a.sent*decay + accepted
		if accepted > 0 {
			a.samples++
		}
		if a.samples >= ratioSamples && a.sent > 0 {
			a.ratio = min(max(a.charged/a.sent, x.Min), x.Max)
		}
	}
	if x.Throttled && x.TokensRefused && x.Sent > 0 && x.Remaining > 0 {
		// The provider refused a request it counts above Remaining.
		cur := a.ratio
		if cur == 0 {
			cur = x.Initial
		}
		if low := x.Remaining / float64(x.Sent); low > cur {
			a.ratio = min(low, x.Max)
			a.charged = a.sent * a.ratio
		}
	}
	a.at, a.remaining, a.limit, a.perNs, a.hasLast = x.At, x.Remaining, x.Limit, x.PerNs, true
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
