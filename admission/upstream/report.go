package upstream

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission/limits"
)

// A Dimension is one quantity a provider limits.
type Dimension uint8

// The dimensions providers publish figures for.
const (
	// Requests is requests per window (OpenAI, Azure OpenAI, Anthropic).
	Requests Dimension = iota
	// Tokens is tokens per window (OpenAI, Azure OpenAI; Anthropic's most
	// restrictive token limit in effect).
	Tokens
	// InputTokens is Anthropic's input tokens per minute.
	InputTokens
	// OutputTokens is Anthropic's output tokens per minute.
	OutputTokens
	numDimensions
)

var dimensionNames = [numDimensions]string{"requests", "tokens", "input-tokens", "output-tokens"}

// String returns the dimension's name as it appears in the providers'
// header names ("requests", "input-tokens").
func (d Dimension) String() string {
	if d < numDimensions {
		return dimensionNames[d]
	}
	return "unknown(" + strconv.Itoa(int(d)) + ")"
}

// MaxReset bounds every wait a report carries (a reset, a retry-after):
// a longer one, or one that does not parse, is ignored, so a broken or
// hostile upstream cannot pause traffic for longer than a day.
const MaxReset = 24 * time.Hour

// maxValue bounds the length of a header value parsed: no figure any
// provider sends is longer, and a longer value is garbage.
const maxValue = 64

// A Figure is what a provider said about one dimension. Each Has flag says
// whether the matching field was sent and parsed.
type Figure struct {
	// Limit is the provider's limit in the dimension's window.
	Limit int64
	// Remaining is what the provider will still accept before Reset.
	Remaining int64
	// Reset is how long after the report's Received instant the window
	// refills, already corrected for the provider's clock.
	Reset time.Duration

	HasLimit, HasRemaining, HasReset bool
}

// A Report is what one provider response said about its limits. Build it
// with Parse; the zero Report says nothing.
type Report struct {
	// Received is the local instant the response arrived; Reset and
	// RetryAfter count from it.
	Received time.Time
	// Figures holds the figures of each Dimension.
	Figures [numDimensions]Figure
	// Throttled reports a refusal by the provider (status 429 or 503):
	// the group is paused (see Store.Observe).
	Throttled bool
	// RetryAfter is the provider's retry-after-ms or retry-after, when
	// HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Sent is the gateway's token estimate of the request this response
	// answers (Request.Tokens), which Parse cannot know: the caller sets
	// it so that the store learns the provider's accounting (see
	// Accounting). Zero teaches nothing.
	Sent int64
}

// Parse reads the rate-limit figures of a provider response: header
// looks a header up by name, case-insensitively (http.Header.Get), status
// is the response's status code and received the local instant it
// arrived. It understands
//
//   - OpenAI and Azure OpenAI: x-ratelimit-limit-{requests,tokens},
//     x-ratelimit-remaining-{requests,tokens} (all Azure sends) and
//     x-ratelimit-reset-{requests,tokens}, a Go-style duration ("1s",
//     "6m0s", "59.1ms") or a number of seconds;
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-{limit,remaining,reset}, the reset an RFC 3339
//     instant;
//   - on any response: retry-after-ms (milliseconds), else retry-after
//     (seconds or an HTTP date).
//
// Instants are converted to waits against the response's Date header, the
// provider's own clock, so a provider whose clock is ahead or behind the
// local one is understood; without a valid Date they count from received.
// When both vendors' headers describe one dimension the tighter figures
// win. Every value is untrusted: one longer than 64 bytes, negative, above
// limits.MaxAmount, a wait above MaxReset, or otherwise malformed is
// ignored, and Parse never fails.
func Parse(header func(name string) string, status int, received time.Time) Report {
	r := Report{Received: received, Throttled: status == 429 || status == 503}
	origin := received
	if d, ok := parseHTTPDate(value(header, "Date")); ok {
		origin = d
	}
	for d := Requests; d < numDimensions; d++ {
		var f, a Figure
		n := &headerNames[d]
		if d <= Tokens {
			f.Limit, f.HasLimit = parseAmount(value(header, n.openAILimit))
			f.Remaining, f.HasRemaining = parseAmount(value(header, n.openAIRemaining))
			f.Reset, f.HasReset = parseWait(value(header, n.openAIReset))
		}
		a.Limit, a.HasLimit = parseAmount(value(header, n.anthropicLimit))
		a.Remaining, a.HasRemaining = parseAmount(value(header, n.anthropicRemaining))
		if t, err := time.Parse(time.RFC3339, value(header, n.anthropicReset)); err == nil {
			a.Reset, a.HasReset = until(t, origin)
		}
		r.Figures[d] = f.tighter(a)
	}
	if v := value(header, "retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms <= float64(MaxReset/time.Millisecond) {
			r.RetryAfter, r.HasRetryAfter = time.Duration(math.Ceil(ms*float64(time.Millisecond))), true
		}
	}
	if v := value(header, "retry-after"); v != "" && !r.HasRetryAfter {
		if s, err := strconv.ParseUint(v, 10, 32); err == nil && time.Duration(s) <= MaxReset/time.Second {
			r.RetryAfter, r.HasRetryAfter = time.Duration(s)*time.Second, true
		} else if t, ok := parseHTTPDate(v); ok {
			r.RetryAfter, r.HasRetryAfter = until(t, origin)
		}
	}
	return r
}

// headerNames holds each dimension's header names, built once.
var headerNames = func() (t [numDimensions]struct {
	openAILimit, openAIRemaining, openAIReset          string
	anthropicLimit, anthropicRemaining, anthropicReset string
}) {
	for d, name := range dimensionNames {
		n := &t[d]
		n.openAILimit, n.openAIRemaining, n.openAIReset = "x-ratelimit-limit-"+name, "x-ratelimit-remaining-"+name, "x-ratelimit-reset-"+name
		prefix := "anthropic-ratelimit-" + name
		n.anthropicLimit, n.anthropicRemaining, n.anthropicReset = prefix+"-limit", prefix+"-remaining", prefix+"-reset"
	}
	return t
}()

// bounded returns f with its amounts within [0, limits.MaxAmount] and its
// reset within [0, MaxReset], as Parse keeps them.
func (f Figure) bounded() Figure {
	f.Limit = min(max(f.Limit, 0), limits.MaxAmount)
	f.Remaining = min(max(f.Remaining, 0), limits.MaxAmount)
	f.Reset = min(max(f.Reset, 0), MaxReset)
	return f
}

// tighter merges two vendors' figures of one dimension: the lower limit
// and remaining, the later reset.
func (f Figure) tighter(o Figure) Figure {
	if o.HasLimit && (!f.HasLimit || o.Limit < f.Limit) {
		f.Limit, f.HasLimit = o.Limit, true
	}
	if o.HasRemaining && (!f.HasRemaining || o.Remaining < f.Remaining) {
		f.Remaining, f.HasRemaining = o.Remaining, true
	}
	if o.HasReset && (!f.HasReset || o.Reset > f.Reset) {
		f.Reset, f.HasReset = o.Reset, true
	}
	return f
}

// value returns the header's value, trimmed, or "" when it is longer than
// any figure.
func value(header func(string) string, name string) string {
	v := header(name)
	if len(v) > maxValue {
		return ""
	}
	return strings.TrimSpace(v)
}

// parseAmount parses a figure in [0, limits.MaxAmount].
func parseAmount(v string) (int64, bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > limits.MaxAmount {
		return 0, false
	}
	return n, true
}

// parseWait parses a reset in [0, MaxReset]: a Go-style duration, or a
// number of seconds.
func parseWait(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if !(s >= 0 && s <= MaxReset.Seconds()) { // NaN too
			return 0, false
		}
		return time.Duration(math.Ceil(s * float64(time.Second))), true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxReset {
		return 0, false
	}
	return d, true
}

// until returns the wait from origin to t, zero for an instant passed,
// and false for one beyond MaxReset.
func until(t, origin time.Time) (time.Duration, bool) {
	d := t.Sub(origin)
	if d > MaxReset {
		return 0, false
	}
	return max(d, 0), true
}

// parseHTTPDate parses an HTTP date in the preferred IMF-fixdate format
// (RFC 9110), the only one providers send.
func parseHTTPDate(v string) (time.Time, bool) {
	t, err := time.Parse("Mon, 02 Jan 2006 15:04:05 GMT", v)
	return t, err == nil
}
