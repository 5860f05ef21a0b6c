package limits

import (
	"math"
	"time"
)

// MaxAmount is the largest amount a request, a usage figure or a limit may
// carry: 2^50, about 1.1e15 (35 years of a million tokens a second). Every
// amount that reaches a limiter is in [0, MaxAmount], so no sum of a
// partition's level and an amount can overflow, and the Redis store, whose
// scripts compute in doubles (exact for integers below 2^53), holds every
// level, every sum of a level and an amount and every debt exactly. The
// controller refuses a request with an amount outside the range,
// Policy.Validate a limit above it, and settlements clamp usage figures to
// it.
const MaxAmount int64 = 1 << 50

// Never is the retry-after of a refusal that waiting cannot fix: the cost
// is larger than the policy could ever admit at once.
const Never time.Duration = -1

// MaxWait is the longest duration a figure carries (about 146 years):
// longer waits saturate at it rather than overflow.
const MaxWait = math.MaxInt64 / 2

// Limit holds the figures one partition is evaluated with: the policy's
// own, or a plan's override for the request's tenant. Build it with
// Policy.Base and change it with Override.Apply, which compute the figures
// derived from it (Window, Rates) once: a field changed by hand afterwards
// leaves them stale.
type Limit struct {
	Algorithm Algorithm
	Period    Period
	// Amount is the policy's Limit.
	Amount int64
	// Burst is the token bucket capacity (Amount when zero).
	Burst int64
	Per   time.Duration
	// MaxHold is the lease expiry of concurrency permits.
	MaxHold time.Duration
	// Location is the quota's calendar location.
	Location *time.Location

	window time.Duration // the header window, computed once
	perNs  float64       // token bucket refill per nanosecond, computed once
	nsPer  float64       // nanoseconds per token
}

// withWindow returns l with its header window computed: the time a token
// bucket takes to refill its capacity (Per × Burst / Amount), the window of
// a window algorithm or fixed quota.
func (l Limit) withWindow() Limit {
	switch l.Algorithm {
	case TokenBucket:
		l.window = time.Duration(min(float64(l.Per)*float64(l.Capacity())/float64(l.Amount), MaxWait))
		l.perNs = float64(l.Amount) / float64(l.Per)
		l.nsPer = float64(l.Per) / float64(l.Amount)
	case Concurrency:
		l.window = 0
	default:
		l.window = l.Per
	}
	return l
}

// Window returns the time window the limit's figures refer to in response
// headers: the time a token bucket takes to refill its capacity, the window
// of a window algorithm or a fixed quota, zero for a concurrency limit.
func (l *Limit) Window() time.Duration { return l.window }

// Rates returns a token bucket's refill rate in tokens per nanosecond and
// its inverse, computed once by Policy.Base and Override.Apply (and here
// for a Limit built by hand).
func (l *Limit) Rates() (perNs, nsPer float64) {
	if l.perNs != 0 {
		return l.perNs, l.nsPer
	}
	return float64(l.Amount) / float64(l.Per), float64(l.Per) / float64(l.Amount)
}

// Capacity returns the most a partition can hold at once: Burst for a token
// bucket, Amount otherwise.
func (l *Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Amount
}

// Horizon returns the longest finite retry-after a partition evaluated
// with l may advise at now, which the debt bound guarantees (see Limiter):
// for a token bucket, twice the time it takes to refill its capacity (the
// wait of a request of the whole capacity from the deepest debt); the
// window of a fixed window or sliding log; twice the window of a sliding
// window counter; the time to the end of the period holding now for a
// quota. A concurrency limit computes no wait of its own (a rejection
// advises the policy's RetryHint): 0.
func (l Limit) Horizon(now time.Time) time.Duration {
	switch l.Algorithm {
	case TokenBucket:
		// As a retry-after is computed: missing tokens over tokens per
		// nanosecond, rounded up.
		perNs, _ := l.Rates()
		return CeilDuration(2 * float64(l.Capacity()) / perNs)
	case FixedWindow, SlidingLog:
		return l.Per
	case SlidingWindow:
		return 2 * min(l.Per, MaxWait)
	case Quota:
		ns := now.UnixNano()
		_, end := QuotaPeriod(&l, ns)
		return time.Duration(end - ns)
	}
	return 0
}

// CeilDuration converts a fractional number of nanoseconds to a Duration,
// rounding up so a retry-after is never early, and saturating at MaxWait.
func CeilDuration(ns float64) time.Duration {
	if ns <= 0 {
		return 0
	}
	if ns > MaxWait {
		return MaxWait
	}
	return time.Duration(math.Ceil(ns))
}

// QuotaPeriod returns the start and end, in nanoseconds since the Unix
// epoch, of the quota period holding now (nanoseconds): a calendar day or
// month in the limit's Location (UTC when nil), or a fixed period of Per
// aligned to the epoch. Stores that keep quotas elsewhere use it so that
// their periods are the in-memory limiter's.
func QuotaPeriod(l *Limit, now int64) (start, end int64) {
	switch l.Period {
	case PeriodDay, PeriodMonth:
		loc := l.Location
		if loc == nil {
			loc = time.UTC
		}
		t := time.Unix(0, now).In(loc)
		y, m, d := t.Date()
		var s, e time.Time
		if l.Period == PeriodDay {
			s = time.Date(y, m, d, 0, 0, 0, 0, loc)
			e = s.AddDate(0, 0, 1)
		} else {
			s = time.Date(y, m, 1, 0, 0, 0, 0, loc)
			e = s.AddDate(0, 1, 0)
		}
		return s.UnixNano(), e.UnixNano()
	default:
		per := int64(l.Per)
		start = now - now%per
		if now < 0 && now%per != 0 {
			start -= per
		}
		return start, start + per
	}
}
