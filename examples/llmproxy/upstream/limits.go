package upstream

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
)

// DefaultWindow is the window of Limits when Limits.Window is zero: the
// providers publish their limits per minute.
const DefaultWindow = time.Minute

// maxLimitedModels bounds the models the simulator keeps budgets for; a
// request for another model is served unlimited (only AnyModel lets
// unknown names through, and a test that floods it must not grow memory).
const maxLimitedModels = 1024

// maxChoices bounds the choices a request is counted for.
const maxChoices = 128

// Limits are a simulated provider's limits, per model, as OpenAI and
// Anthropic enforce them: Requests requests and Tokens tokens (prompt
// plus the output the request will generate) per Window, a rolling window
// with no boundaries: each budget replenishes continuously, at its limit
// per Window, up to the limit, so it is full again Window after it was
// spent. A request over either is refused with 429, rate_limit_exceeded,
// with retry-after, retry-after-ms and the x-ratelimit headers; every
// answer to a limited request carries x-ratelimit-{limit,remaining,
// reset}-{requests,tokens}, the reset a Go duration ("6m0s", "1.5s")
// until that budget is full again. A zero field does not limit; the zero
// Limits send no headers.
type Limits struct {
	Requests int64
	Tokens   int64
	// Window is the time a spent budget takes to refill; zero means
	// DefaultWindow.
	Window time.Duration
	// CharsPerToken, when set, makes the tokens limit count a request's
	// prompt as a real provider's limiter does, by an estimate rather
	// than the usage it answers with: its bytes (plus 3 a chat message
	// and 3 for the reply) over CharsPerToken, rounded up. Tests set it
	// so that the provider counts a prompt above or below the gateway's
	// exact count; zero counts the usage's prompt tokens (one token per
	// four bytes of each string).
	CharsPerToken float64
	// DefaultMaxTokens is what the tokens limit counts for the output of
	// a request that sets no max_tokens (nor max_completion_tokens or
	// max_output_tokens). The limit counts a request when it accepts it,
	// as OpenAI's does: its prompt plus max_tokens when it sets one
	// (whatever it then generates), else DefaultMaxTokens, per choice;
	// zero counts the output it will generate.
	DefaultMaxTokens int64
}

// enabled reports whether l limits anything.
func (l *Limits) enabled() bool { return l.Requests > 0 || l.Tokens > 0 }

// bucket is what is left of one budget of one model at an instant.
type bucket struct {
	left float64
	at   time.Time
}

// refill brings b to now, at limit per window.
func (b *bucket) refill(limit int64, window time.Duration, now time.Time) {
	if now.After(b.at) {
		b.left = min(float64(limit), b.left+float64(limit)*float64(now.Sub(b.at))/float64(window))
		b.at = now
	}
}

// until returns how long b takes to hold n.
func (b *bucket) until(n, limit int64, window time.Duration) time.Duration {
	if float64(n) <= b.left {
		return 0
	}
	return time.Duration(math.Ceil((float64(n) - b.left) * float64(window) / float64(limit)))
}

// limiter enforces Limits per model.
type limiter struct {
	cfg    Limits
	clock  admission.Clock
	mu     sync.Mutex
	models map[string]*[2]bucket // requests, tokens
}

func newLimiter(cfg Limits, clock admission.Clock) *limiter {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	return &limiter{cfg: cfg, clock: clock, models: map[string]*[2]bucket{}}
}

// verdict is what the limiter decided about one request: the figures of
// each budget after it, and, when refused, which limit refused it and
// when to retry.
type verdict struct {
	remainingRequests, remainingTokens int64
	resetRequests, resetTokens         time.Duration
	refused                            string // "requests", "tokens" or ""
	retry                              time.Duration
}

// take admits a request of n tokens for model, or refuses it.
func (l *limiter) take(model string, n int64) verdict {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.models[model]
	if b == nil {
		if len(l.models) >= maxLimitedModels {
			return verdict{remainingRequests: l.cfg.Requests, remainingTokens: l.cfg.Tokens}
		}
		b = &[2]bucket{{left: float64(l.cfg.Requests), at: now}, {left: float64(l.cfg.Tokens), at: now}}
		l.models[model] = b
	}
	req, tok := &b[0], &b[1]
	req.refill(l.cfg.Requests, l.cfg.Window, now)
	tok.refill(l.cfg.Tokens, l.cfg.Window, now)
	var v verdict
	switch {
	case l.cfg.Requests > 0 && req.left < 1:
		v.refused, v.retry = "requests", req.until(1, l.cfg.Requests, l.cfg.Window)
	case l.cfg.Tokens > 0 && n > l.cfg.Tokens:
		v.refused, v.retry = "tokens", l.cfg.Window
	case l.cfg.Tokens > 0 && float64(n) > tok.left:
		v.refused, v.retry = "tokens", tok.until(n, l.cfg.Tokens, l.cfg.Window)
	default:
		req.left--
		tok.left -= float64(n)
	}
	v.remainingRequests, v.remainingTokens = max(int64(req.left), 0), max(int64(tok.left), 0)
	if l.cfg.Requests > 0 {
		v.resetRequests = req.until(l.cfg.Requests, l.cfg.Requests, l.cfg.Window)
	}
	if l.cfg.Tokens > 0 {
		v.resetTokens = tok.until(l.cfg.Tokens, l.cfg.Tokens, l.cfg.Window)
	}
	v.retry = max(v.retry, time.Millisecond)
	return v
}

// setHeaders writes the provider's limit headers of v on h.
func (l *limiter) setHeaders(h http.Header, v verdict) {
	set := func(dim string, limit, remaining int64, reset time.Duration) {
		if limit <= 0 {
			return
		}
		h.Set("X-Ratelimit-Limit-"+dim, strconv.FormatInt(limit, 10))
		h.Set("X-Ratelimit-Remaining-"+dim, strconv.FormatInt(remaining, 10))
		h.Set("X-Ratelimit-Reset-"+dim, reset.Round(time.Millisecond).String())
	}
	set("Requests", l.cfg.Requests, v.remainingRequests, v.resetRequests)
	set("Tokens", l.cfg.Tokens, v.remainingTokens, v.resetTokens)
	if v.refused != "" {
		h.Set("Retry-After", strconv.FormatInt(int64((v.retry+time.Second-1)/time.Second), 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(int64((v.retry+time.Millisecond-1)/time.Millisecond), 10))
	}
}

// refuse answers a request the limits refused, as OpenAI does.
func (l *limiter) refuse(w http.ResponseWriter, model string, n int64, v verdict) {
	what, limit, used := "requests per min (RPM)", l.cfg.Requests, l.cfg.Requests-v.remainingRequests
	requested := int64(1)
	if v.refused == "tokens" {
		what, limit, used, requested = "tokens per min (TPM)", l.cfg.Tokens, l.cfg.Tokens-v.remainingTokens, n
	}
	writeError(w, http.StatusTooManyRequests, v.refused, "rate_limit_exceeded", fmt.Sprintf(
		"Rate limit reached for %s in organization org-simulated on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
		model, what, limit, used, requested, v.retry.Round(time.Millisecond)))
}

// count is what a request counts against the tokens limit: its prompt
// (see Limits.CharsPerToken) and, on every choice, its output limit, else
// Limits.DefaultMaxTokens, else out, the output it will generate.
func (l *limiter) count(path string, req *simRequest, out int) int64 {
	limit := int64(out)
	if l.cfg.DefaultMaxTokens > 0 {
		limit = l.cfg.DefaultMaxTokens
	}
	if n, ok := req.outputLimit(); ok {
		limit = int64(n)
	}
	text := textTokens
	if l.cfg.CharsPerToken > 0 {
		text = func(s string) int { return len(s) }
	}
	var prompt int
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		prompt = chatPromptCount(req, text)
	case strings.HasSuffix(path, "/completions"):
		prompt = promptCount(req.Prompt, text)
	case strings.HasSuffix(path, "/embeddings"):
		prompt, limit = promptCount(req.Input, text), 0
	default:
		prompt = promptCount(req.Input, text) + text(req.Instructions)
	}
	n := int64(prompt)
	if l.cfg.CharsPerToken > 0 {
		n = int64(min(math.Ceil(float64(prompt)/l.cfg.CharsPerToken), 1<<40))
	}
	return n + min(max(limit, 0), 1<<40)*int64(min(max(req.N, 1), maxChoices))
}
