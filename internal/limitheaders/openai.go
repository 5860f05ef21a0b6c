package limitheaders

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// SetOpenAIHeaders sets the OpenAI-style limit headers that OpenAI SDKs
// and clients read, for the requests and the tokens unit each:
//
//	x-ratelimit-limit-requests: 600
//	x-ratelimit-remaining-requests: 599
//	x-ratelimit-reset-requests: 100ms
//	x-ratelimit-limit-tokens: 100000
//	x-ratelimit-remaining-tokens: 4200
//	x-ratelimit-reset-tokens: 16.1s
//
// Each trio describes the tightest policy counting that unit, chosen as
// Tightest chooses; the reset is written by FormatReset. Concurrency limits are left out: they count requests in
// flight, not requests per window.
func SetOpenAIHeaders(h http.Header, sts []admission.Status) {
	setOpenAI(h, sts, limits.UnitRequests, "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests")
	setOpenAI(h, sts, limits.UnitTokens, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens")
}

func setOpenAI(h http.Header, sts []admission.Status, unit limits.Unit, limit, remaining, reset string) {
	var stack [maxStatusesOnStack]admission.Status
	of := stack[:0]
	for i := range sts {
		u := sts[i].Unit
		if u == "" {
			u = limits.UnitRequests
		}
		if u == unit && sts[i].Algorithm != limits.Concurrency {
			of = append(of, sts[i])
		}
	}
	best := Tightest(of)
	if best < 0 {
		return
	}
	s := &of[best]
	h[limit] = []string{strconv.FormatInt(s.Limit, 10)}
	h[remaining] = []string{strconv.FormatInt(max(0, s.Remaining), 10)}
	h[reset] = []string{FormatReset(s.Reset)}
}

// FormatReset writes a reset the way OpenAI's headers do, as a Go duration
// ("6m0s", "1.5s", "20ms"), rounded up to the millisecond so that a reset
// is never announced earlier than it is: a partition that is full for
// another 400µs says "1ms", not "0s" (retry now).
func FormatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d.String()
}

// SetRetryHints sets the retry hints of a rejection for OpenAI-style
// clients: Retry-After in whole seconds (rounded up), retry-after-ms, and
// x-should-retry. x-should-retry is "false" when waiting cannot help: the
// request can never be admitted (limits.Never: no wait is advertised),
// or the wait would end after the caller's deadline (a zero deadline means
// none: the wait is still advertised, so a client learns when, say, its
// monthly quota resets). Otherwise it is "true".
func SetRetryHints(h http.Header, retryAfter time.Duration, now, deadline time.Time) {
	if retryAfter == limits.Never {
		h["X-Should-Retry"] = []string{"false"}
		return
	}
	SetRetryAfter(h, retryAfter)
	SetRetryAfterMs(h, retryAfter)
	if !deadline.IsZero() && !now.Add(retryAfter).Before(deadline) {
		h["X-Should-Retry"] = []string{"false"}
		return
	}
	h["X-Should-Retry"] = []string{"true"}
}
