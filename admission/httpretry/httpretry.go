// Package httpretry is an http.RoundTripper for clients of rate-limited
// APIs: it retries what is safe to retry, waits what the server asks, and
// never waits past the request's deadline.
//
// A request is retried only when its method is idempotent (GET, HEAD,
// OPTIONS, TRACE, PUT, DELETE) or it carries an idempotency key, and only
// when its body can be replayed (no body, or Request.GetBody set, as
// http.NewRequest does for in-memory bodies). A response is retried when
// the server says so with "x-should-retry: true", or when its status is
// 408, 429, 500, 502, 503 or 504 and the server did not say
// "x-should-retry: false". The wait is the server's hint: retry-after-ms
// (milliseconds, fractional allowed), else Retry-After (seconds or an
// HTTP-date); without a hint, exponential backoff with full jitter. The
// attempt budget is never exceeded, and when the wait would end after the
// context's deadline (or exceed MaxWait) the transport gives up at once and
// returns the last response, so the caller sees the server's answer and
// headers.
//
// # Jitter and the retry cap
//
// A limiter tells every caller it rejects at one instant to come back when
// the next permit frees, so callers that honour the hint exactly all come
// back at that same instant, one wins and the rest are rejected again: they
// stampede until their attempts run out. The transport therefore waits a
// hint h for a uniformly random time in [h, h·(1+Jitter)] (never less than
// the server asked, never past MaxWait or the deadline). A hint names the
// time until one permit frees, so the spread must cover as many permits
// as there are callers waiting: DefaultJitter is 3, which spreads callers
// over [h, 4h], the time three more permits free after the first (a
// jitter of 1 covers one, and callers stampede as before). Against a token bucket of 4 per second, 8
// callers sending 10 requests each at the same instants, with the default
// 4 attempts: honouring retry-after-ms exactly, 10 of the 80 requests end
// rejected; with the default jitter 78 to 80 of 80 are admitted over ten
// seeds (TestJitterNoStampede). Set Jitter negative to honour hints
// exactly.
//
// Retries are numbered (RetryCountHeader, as OpenAI's and Anthropic's
// SDKs number theirs). A Sluice queue that refuses a request because it
// is full holds a place for its numbered retry from the hint's time for
// two seconds, spaces the hints it gives one tenant so that they do not
// stampede, and says so (HeldHeader): the transport then waits that hint
// exactly, without jitter.
//
// The transport also caps the requests retrying at once (waiting for their
// next attempt or sending it) to one host, MaxRetriesPerHost: a request
// that would start retrying past the cap gets its response back as is, so
// a sick host sees at most that many retries on top of its first
// attempts. The count is kept per URL host (host:port) only while a retry
// is in flight, an entry is dropped when its last retry ends, and at most
// 1024 hosts are tracked at once (a retry to one more host is not
// attempted), so the table's memory is bounded.
package httpretry

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of a zero Transport.
const (
	DefaultMaxAttempts = 4
	DefaultBaseDelay   = 250 * time.Millisecond
	DefaultMaxDelay    = 20 * time.Second
	DefaultMaxWait     = time.Minute
	// DefaultJitter spreads a hint h over [h, 4h]: callers told to come
	// back when the next permit frees spread over the time three more
	// permits free.
	DefaultJitter = 3.0
	// DefaultMaxRetriesPerHost is the number of requests that may be
	// retrying at once to one host.
	DefaultMaxRetriesPerHost = 64
)

// maxJitter bounds Transport.Jitter: a hint is never stretched past 11
// times itself.
const maxJitter = 10

// maxHosts bounds the hosts tracked at once for MaxRetriesPerHost.
const maxHosts = 1024

// DefaultIdempotencyHeaders are the headers whose presence makes a
// non-idempotent request safe to retry.
var DefaultIdempotencyHeaders = []string{"Idempotency-Key", "X-Idempotency-Key"}

// Transport retries requests through Base. The zero value is ready to use;
// it is safe for concurrent use as long as its fields are not changed.
type Transport struct {
	// Base performs each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts is the attempt budget, the first attempt included;
	// 0 means DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff used when the server gives
	// no hint: attempt n waits a uniformly random time in
	// [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)]. Zero means the defaults.
	BaseDelay time.Duration
	MaxDelay  time.Duration // the backoff's ceiling
	// MaxWait is the longest wait accepted: a hint asking for more gives
	// the response back at once. 0 means DefaultMaxWait.
	MaxWait time.Duration
	// IdempotencyHeaders make non-idempotent requests retryable when
	// present; nil means DefaultIdempotencyHeaders.
	IdempotencyHeaders []string
	// Now and Sleep are the clock; nil means the real one. Sleep returns
	// early with ctx's error when ctx ends.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error // waits d or until ctx ends
	// Rand returns a uniform number in [0, 1) for the jitter; nil means
	// math/rand/v2.
	Rand func() float64
	// Jitter spreads the retries of callers given the same hint: a hint h
	// is waited for a uniformly random time in [h, h·(1+Jitter)], cut at
	// MaxWait and the deadline. 0 means DefaultJitter, values above 10 are
	// 10, and a negative value honours hints exactly.
	Jitter float64
	// MaxRetriesPerHost caps the requests retrying at once to one URL
	// host (host:port) through this Transport: a request that would start
	// retrying past it gets its response back as is. 0 means
	// DefaultMaxRetriesPerHost; a negative value means no cap.
	MaxRetriesPerHost int

	mu       sync.Mutex
	retrying map[string]int // host → requests retrying; no zero entries
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	max := t.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	if !t.Retryable(req) {
		max = 1
	}
	ctx := req.Context()
	attemptReq := req
	host := ""
	defer func() {
		if host != "" {
			t.release(host)
		}
	}()
	for attempt := 1; ; attempt++ {
		resp, err := base.RoundTrip(attemptReq)
		if attempt >= max || ctx.Err() != nil {
			return resp, err
		}
		var wait time.Duration
		if err != nil {
			wait = t.backoff(attempt)
		} else {
			retry, _ := ShouldRetry(resp)
			if !retry {
				return resp, nil
			}
			hint, ok := Hint(resp.Header, t.now())
			switch {
			case ok && resp.Header.Get(HeldHeader) == "true":
				wait = hint
			case ok:
				wait = t.jitter(hint, t.room(ctx))
			default:
				wait = t.backoff(attempt)
			}
		}
		if wait > t.room(ctx) {
			return resp, err
		}
		next, berr := nextRequest(req, attempt)
		if berr != nil {
			return resp, err
		}
		if host == "" {
			if !t.acquire(req.URL.Host) {
				return resp, err
			}
			host = req.URL.Host
		}
		if resp != nil {
			drain(resp)
		}
		if serr := t.sleep(ctx, wait); serr != nil {
			return nil, serr
		}
		attemptReq = next
	}
}

// Retryable reports whether req may be sent more than once: an idempotent
// method or an idempotency key, and a body that can be replayed.
func (t *Transport) Retryable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	hs := t.IdempotencyHeaders
	if hs == nil {
		hs = DefaultIdempotencyHeaders
	}
	for _, h := range hs {
		if req.Header.Get(h) != "" {
			return true
		}
	}
	return false
}

// ShouldRetry reports whether resp is worth retrying, and whether the
// server said so explicitly with x-should-retry.
func ShouldRetry(resp *http.Response) (retry, explicit bool) {
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("X-Should-Retry"))) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true, false
	}
	return false, false
}

// Hint returns the wait a response asks for: retry-after-ms, else
// Retry-After in seconds or as an HTTP-date (relative to now). A date in
// the past is a zero wait.
func Hint(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 || s > 1e9 {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(0, at.Sub(now)), true
	}
	return 0, false
}

// WaitHint waits out a server's retry hint as RoundTrip does, for a
// client of another transport (a gRPC interceptor reading RetryInfo): a
// uniformly random time in [hint, hint·(1+Jitter)], cut at MaxWait and
// ctx's deadline, through Sleep. It returns false at once, without
// waiting, when even the hint would end past the deadline or exceed
// MaxWait, and ctx's error when ctx ends while it waits.
func (t *Transport) WaitHint(ctx context.Context, hint time.Duration) (bool, error) {
	room := t.room(ctx)
	wait := t.jitter(hint, room)
	if wait > room {
		return false, nil
	}
	return true, t.sleep(ctx, wait)
}

// room returns the longest acceptable wait: within MaxWait and ending
// before ctx's deadline; negative when the deadline has passed.
func (t *Transport) room(ctx context.Context) time.Duration {
	r := t.MaxWait
	if r <= 0 {
		r = DefaultMaxWait
	}
	if dl, ok := ctx.Deadline(); ok {
		r = min(r, dl.Sub(t.now())-1)
	}
	return r
}

// jitter returns a uniformly random wait in [hint, hint·(1+Jitter)], cut
// at room; a hint longer than room is returned as is (and refused).
func (t *Transport) jitter(hint, room time.Duration) time.Duration {
	j := t.Jitter
	switch {
	case j == 0:
		j = DefaultJitter
	case !(j > 0): // negative or NaN
		return hint
	}
	if hint >= room {
		return hint
	}
	span := min(float64(hint)*min(j, maxJitter), float64(room-hint))
	return hint + time.Duration(t.rand()*span)
}

// acquire takes a retry slot for host, or reports that host already has
// MaxRetriesPerHost retries in flight (or that maxHosts hosts do).
func (t *Transport) acquire(host string) bool {
	capacity := t.MaxRetriesPerHost
	if capacity == 0 {
		capacity = DefaultMaxRetriesPerHost
	}
	if capacity < 0 {
		capacity = math.MaxInt
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.retrying[host]
	if n >= capacity || (n == 0 && len(t.retrying) >= maxHosts) {
		return false
	}
	if t.retrying == nil {
		t.retrying = make(map[string]int)
	}
	t.retrying[host] = n + 1
	return true
}

// release gives back host's retry slot, dropping the entry of a host left
// without retries.
func (t *Transport) release(host string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.retrying[host]; n > 1 {
		t.retrying[host] = n - 1
	} else {
		delete(t.retrying, host)
	}
}

func (t *Transport) backoff(attempt int) time.Duration {
	base, ceil := t.BaseDelay, t.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if ceil <= 0 {
		ceil = DefaultMaxDelay
	}
	d := base
	for i := 1; i < attempt && d < ceil; i++ {
		d *= 2
	}
	d = min(d, ceil)
	return time.Duration(t.rand() * float64(d))
}

func (t *Transport) rand() float64 {
	if t.Rand != nil {
		return t.Rand()
	}
	return rand.Float64()
}

func (t *Transport) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

func (t *Transport) sleep(ctx context.Context, d time.Duration) error {
	if t.Sleep != nil {
		return t.Sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// HeldHeader, "true" on a refusal, says the server holds a place for the
// request's retry from the refusal's hint on, for a short while: the
// transport then waits the hint exactly, without jitter (the server
// spaces the hints it gives, one place each, so they do not stampede).
const HeldHeader = "X-Retry-Held"

// RetryCountHeader numbers a request's retries, as OpenAI's and
// Anthropic's SDKs do: a server that holds a place in its queue for a
// refused request's retry (Sluice's gateway and httpadmit do) knows the
// retry by it.
const RetryCountHeader = "X-Stainless-Retry-Count"

// nextRequest returns a copy of req with a fresh body for the retry that
// follows attempt, numbered (RetryCountHeader).
func nextRequest(req *http.Request, attempt int) (*http.Request, error) {
	next := req.Clone(req.Context())
	next.Header.Set(RetryCountHeader, strconv.Itoa(attempt))
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		next.Body = body
	}
	return next, nil
}

// drain reads a little of a discarded response so that its connection can
// be reused, then closes it.
func drain(resp *http.Response) {
	if resp.Body != nil {
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		_ = resp.Body.Close()
	}
}
