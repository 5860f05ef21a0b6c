package httpadmit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission"
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
// Each trio describes the tightest policy counting that unit; the reset is
// a Go duration rounded to the millisecond. Concurrency limits are left
// out: they have no reset.
func SetOpenAIHeaders(h http.Header, sts []admission.Status) {
	setOpenAI(h, sts, admission.UnitRequests, "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests")
	setOpenAI(h, sts, admission.UnitTokens, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens")
}

func setOpenAI(h http.Header, sts []admission.Status, unit admission.Unit, limit, remaining, reset string) {
	best := -1
	var bestRatio float64
	for i := range sts {
		s := &sts[i]
		u := s.Unit
		if u == "" {
			u = admission.UnitRequests
		}
		if u != unit || s.Algorithm == admission.Concurrency || s.Limit <= 0 {
			continue
		}
		r := float64(max(0, s.Remaining)) / float64(s.Limit)
		if best < 0 || r < bestRatio {
			best, bestRatio = i, r
		}
	}
	if best < 0 {
		return
	}
	s := &sts[best]
	h[limit] = []string{strconv.FormatInt(s.Limit, 10)}
	h[remaining] = []string{strconv.FormatInt(max(0, s.Remaining), 10)}
	h[reset] = []string{s.Reset.Round(time.Millisecond).String()}
}

// SetRetryHints sets the retry hints of a rejection for OpenAI-style
// clients: Retry-After in whole seconds (rounded up), retry-after-ms, and
// x-should-retry. x-should-retry is "false" when waiting cannot help: the
// request can never be admitted (admission.Never: no wait is advertised),
// or the wait would end after the caller's deadline (a zero deadline means
// none: the wait is still advertised, so a client learns when, say, its
// monthly quota resets). Otherwise it is "true".
func SetRetryHints(h http.Header, retryAfter time.Duration, now, deadline time.Time) {
	if retryAfter == admission.Never {
		h["X-Should-Retry"] = []string{"false"}
		return
	}
	SetRetryAfter(h, retryAfter)
	ms := (retryAfter + time.Millisecond - 1) / time.Millisecond
	h["Retry-After-Ms"] = []string{strconv.FormatInt(int64(max(0, ms)), 10)}
	if !deadline.IsZero() && !now.Add(retryAfter).Before(deadline) {
		h["X-Should-Retry"] = []string{"false"}
		return
	}
	h["X-Should-Retry"] = []string{"true"}
}
