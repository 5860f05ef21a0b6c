// Package limitheaders writes the limit figures of admission decisions
// into HTTP headers: the IETF RateLimit-Policy and RateLimit fields,
// X-RateLimit-*, Retry-After (and Retry-After-Ms), Server-Timing's queue
// entry, Sluice-Would-Reject, and the OpenAI-style x-ratelimit-* fields
// and retry hints of an LLM gateway. Package httpadmit (the net/http
// middleware), the Envoy rate-limit service and the LLM gateway share it;
// what each header means is written in httpadmit's package doc.
package limitheaders

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpretry"
	"github.com/sluicehq/sluice/admission/limits"
)

// Canonical names of the headers the middleware writes.
const (
	HeaderRateLimitPolicy    = "Ratelimit-Policy"
	HeaderRateLimit          = "Ratelimit"
	HeaderXRateLimitLimit    = "X-Ratelimit-Limit"
	HeaderXRateLimitRemain   = "X-Ratelimit-Remaining"
	HeaderXRateLimitReset    = "X-Ratelimit-Reset"
	HeaderRetryAfter         = "Retry-After"
	HeaderRetryAfterMs       = "Retry-After-Ms"
	HeaderServerTiming       = "Server-Timing"
	HeaderWouldReject        = "Sluice-Would-Reject"
	unitParam                = "sluice-qu"
	maxStatusesOnStack       = 8
	headerBufferSizeOnStack  = 512
	concurrentRequestsQuUnit = "concurrent-requests"
)

// Seconds returns d in whole seconds, rounded up: the form of Retry-After
// and of the reset figures. Negative durations give 0.
func Seconds(d time.Duration) int64 { return ceilUnits(d, time.Second) }

// SetRetryAfter sets Retry-After to d in whole seconds, rounded up and at
// least 1. It does nothing for limits.Never: waiting cannot help.
func SetRetryAfter(h http.Header, d time.Duration) {
	if d == limits.Never {
		return
	}
	h[HeaderRetryAfter] = []string{strconv.FormatInt(max(1, Seconds(d)), 10)}
}

// SetRetryHeld sets httpretry.HeldHeader on the answer to rej when its
// queue holds a place for the request's retry (admission.Rejection.Held):
// a client should come back at the hint exactly.
func SetRetryHeld(h http.Header, rej *admission.Rejection) {
	if rej.Held {
		h[httpretry.HeldHeader] = []string{"true"}
	}
}

// Millis returns d in milliseconds, rounded up: the form of
// Retry-After-Ms. Negative durations give 0.
func Millis(d time.Duration) int64 { return ceilUnits(d, time.Millisecond) }

// ceilUnits returns d in units, rounded up; 0 for negative durations.
func ceilUnits(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}

// SetRetryAfterMs sets Retry-After-Ms to d in milliseconds, rounded up:
// the precise figure beside Retry-After's whole seconds. It does nothing
// for limits.Never.
func SetRetryAfterMs(h http.Header, d time.Duration) {
	if d == limits.Never {
		return
	}
	h[HeaderRetryAfterMs] = []string{strconv.FormatInt(Millis(d), 10)}
}

// SetQueueTiming adds to h the Server-Timing entry of a queue wait d, in
// milliseconds with up to three decimals: "queue;dur=1020.5". It does
// nothing when d <= 0.
func SetQueueTiming(h http.Header, d time.Duration) {
	if d <= 0 {
		return
	}
	b := make([]byte, 0, 32)
	b = append(b, "queue;dur="...)
	b = strconv.AppendFloat(b, float64(d.Round(time.Microsecond))/float64(time.Millisecond), 'f', -1, 64)
	h[HeaderServerTiming] = append(h[HeaderServerTiming], string(b))
}

// AppendPolicyItem appends one RateLimit-Policy list member for s in the
// syntax of draft-ietf-httpapi-ratelimit-headers-10:
//
//	"tpm";q=100000;w=60;sluice-qu="tokens"
//
// q is the quota (s.Limit), w the window in seconds (omitted for a
// concurrency limit, which has none); qu="concurrent-requests" marks a
// concurrency limit, and the vendor parameter sluice-qu names the unit when
// it is not requests (tokens, cost or a named unit).
func AppendPolicyItem(b []byte, s *admission.Status) []byte {
	b = appendSFString(b, s.Policy)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, s.Limit, 10)
	return appendPolicyParams(b, s)
}

// appendPolicyParams appends the parameters that follow q.
func appendPolicyParams(b []byte, s *admission.Status) []byte {
	if s.Window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, Seconds(s.Window), 10)
	}
	if s.Algorithm == limits.Concurrency {
		b = append(b, `;qu="`+concurrentRequestsQuUnit+`"`...)
	}
	if s.Unit != "" && s.Unit != limits.UnitRequests {
		b = append(b, ";"+unitParam+"="...)
		b = appendSFString(b, string(s.Unit))
	}
	return b
}

// AppendLimitItem appends one RateLimit list member for s:
//
//	"tpm";r=4200;t=17
//
// r is what remains, t the seconds until the partition is fully available
// again, rounded up.
func AppendLimitItem(b []byte, s *admission.Status) []byte {
	b = appendSFString(b, s.Policy)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(0, s.Remaining), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, Seconds(s.Reset), 10)
	return b
}

// appendSFString appends s as a structured-field string: quoted, with
// backslash and quote escaped and anything outside printable ASCII dropped.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20 && c < 0x7f:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// Enforced filters sts in place to the enforcing policies whose figures
// are known: a shadow policy's figures stay out of the headers, so clients
// neither learn about limits not yet enforced nor pace themselves by them
// (which would skew what the shadow run measures), and so do those of a
// policy that admitted without its failed store (Status.FailedOpen),
// which would read "nothing left, retry now".
func Enforced(sts []admission.Status) []admission.Status {
	out := sts[:0]
	for _, s := range sts {
		if s.Mode == limits.Enforce && !s.FailedOpen {
			out = append(out, s)
		}
	}
	return out
}

// Tightest returns the index of the status the X-RateLimit-* fields
// describe, all three from it, or -1 when there is none: the policy with
// the least room left as a fraction of its limit (Remaining/Limit). A
// concurrency limit counts only once it is at capacity (until then its
// room says nothing about pacing) or when no other policy is there.
// Equal fractions go to the longer Reset: the one the caller waits for.
func Tightest(sts []admission.Status) int {
	best := -1
	var bestRank float64
	for i := range sts {
		s := &sts[i]
		if s.Limit <= 0 {
			continue
		}
		r := float64(max(0, s.Remaining)) / float64(s.Limit)
		if s.Algorithm == limits.Concurrency && s.Remaining > 0 {
			// After every rate policy, whose fractions are at most 1.
			r += 1
		}
		if best < 0 || r < bestRank || (r == bestRank && s.Reset > sts[best].Reset) {
			best, bestRank = i, r
		}
	}
	return best
}

// SetLimitHeaders sets the limit headers for sts on h: RateLimit-Policy and
// RateLimit with one member per policy, and X-RateLimit-Limit, -Remaining
// and -Reset (seconds until fully available) for the tightest policy. It
// allocates two objects whatever the number of policies.
func SetLimitHeaders(h http.Header, sts []admission.Status) { SetLimitHeadersIn(h, sts, nil) }

// Values holds the values of the five limit headers, for a caller of
// SetLimitHeadersIn that allocates something per request anyway and
// keeps them in it.
type Values [5]string

// SetLimitHeadersIn is SetLimitHeaders with the header values held in
// vals (nil: allocated), which h then refers to: one allocation fewer.
// vals must not be used for anything else while h is.
func SetLimitHeadersIn(h http.Header, sts []admission.Status, vals *Values) {
	if len(sts) == 0 {
		return
	}
	var stack [headerBufferSizeOnStack]byte
	b := stack[:0]
	tight := Tightest(sts)
	// The X-RateLimit values are the q, r and t figures of the tightest
	// member, sliced out of the structured fields rather than written again.
	var q, r, t [2]int
	for i := range sts {
		if i > 0 {
			b = append(b, ", "...)
		}
		if i == tight {
			b = appendSFString(b, sts[i].Policy)
			b = append(b, ";q="...)
			q[0] = len(b)
			b = strconv.AppendInt(b, sts[i].Limit, 10)
			q[1] = len(b)
			b = appendPolicyParams(b, &sts[i])
			continue
		}
		b = AppendPolicyItem(b, &sts[i])
	}
	policyEnd := len(b)
	for i := range sts {
		if i > 0 {
			b = append(b, ", "...)
		}
		if i == tight {
			b = appendSFString(b, sts[i].Policy)
			b = append(b, ";r="...)
			r[0] = len(b)
			b = strconv.AppendInt(b, max(0, sts[i].Remaining), 10)
			r[1] = len(b)
			b = append(b, ";t="...)
			t[0] = len(b)
			b = strconv.AppendInt(b, Seconds(sts[i].Reset), 10)
			t[1] = len(b)
			continue
		}
		b = AppendLimitItem(b, &sts[i])
	}
	all := string(b)
	var v []string
	switch {
	case vals != nil:
		v = vals[:]
	case tight < 0:
		v = make([]string, 2)
	default:
		v = make([]string, len(Values{}))
	}
	v[0], v[1] = all[:policyEnd], all[policyEnd:]
	h[HeaderRateLimitPolicy] = v[0:1:1]
	h[HeaderRateLimit] = v[1:2:2]
	if tight < 0 {
		return
	}
	v[2], v[3], v[4] = all[q[0]:q[1]], all[r[0]:r[1]], all[t[0]:t[1]]
	h[HeaderXRateLimitLimit] = v[2:3:3]
	h[HeaderXRateLimitRemain] = v[3:4:4]
	h[HeaderXRateLimitReset] = v[4:5:5]
}

// SetWouldReject sets the Sluice-Would-Reject header naming the shadow
// policies that would have rejected the request; it does nothing when
// names is empty.
func SetWouldReject(h http.Header, names []string) {
	if len(names) > 0 {
		h[HeaderWouldReject] = []string{strings.Join(names, ", ")}
	}
}

// StatusCode returns the HTTP status of a rejection: 429 for the caller's
// own rate, concurrency and queue limits, quotaStatus (403 or 429; 0 means
// 403) for an exhausted quota, 503 when the limit store is unavailable or
// the partition table is full, 403 for a loop (repeating the step will
// not be served, see docs/sessions.md).
func StatusCode(rej *admission.Rejection, quotaStatus int) int {
	switch rej.Reason {
	case admission.ReasonLoop:
		return http.StatusForbidden
	case admission.ReasonQuota:
		if quotaStatus == 0 {
			return http.StatusForbidden
		}
		return quotaStatus
	case admission.ReasonStoreUnavailable, admission.ReasonOverflow:
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}
