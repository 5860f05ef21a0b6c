package upstream

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultWindow is the window of Limits when Limits.Window is zero: the
// providers publish their limits per minute.
const DefaultWindow = time.Minute

// maxLimitedModels bounds the models the simulator keeps a window for; a
// request for another model is served unlimited (only AnyModel lets
// unknown names through, and a test that floods it must not grow memory).
const maxLimitedModels = 1024

// maxChoices bounds the choices a request is counted for.
const maxChoices = 128

// Limits are a simulated provider's limits, per model, as OpenAI enforces
// them: at most Requests requests and Tokens tokens (prompt plus the
// output the request will generate) in any Window, a rolling window. A
// request over either is refused with 429, rate_limit_exceeded, with
// retry-after, retry-after-ms and the x-ratelimit headers; every answer
// to a limited request carries x-ratelimit-{limit,remaining,reset}-
// {requests,tokens}, the reset a Go duration ("6m0s", "1.5s") until the
// window is empty again. A zero field does not limit; the zero Limits
// send no headers.
type Limits struct {
	Requests int64
	Tokens   int64
	// Window is the rolling window; zero means DefaultWindow.
	Window time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// enabled reports whether l limits anything.
func (l *Limits) enabled() bool { return l.Requests > 0 || l.Tokens > 0 }

// use is one request admitted in a window.
type use struct {
	at     time.Time
	tokens int64
}

// window is the rolling window of one model: the requests admitted in
// the last Limits.Window, oldest first, and their tokens.
type window struct {
	uses   []use
	tokens int64
}

// expire drops the uses older than since.
func (w *window) expire(since time.Time) {
	i := 0
	for i < len(w.uses) && !w.uses[i].at.After(since) {
		w.tokens -= w.uses[i].tokens
		i++
	}
	w.uses = w.uses[i:]
}

// limiter enforces Limits per model.
type limiter struct {
	cfg     Limits
	mu      sync.Mutex
	windows map[string]*window
}

func newLimiter(cfg Limits) *limiter {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &limiter{cfg: cfg, windows: map[string]*window{}}
}

// verdict is what the limiter decided about one request: the figures of
// each dimension after it, and, when refused, which limit refused it and
// when to retry.
type verdict struct {
	remainingRequests, remainingTokens int64
	resetRequests, resetTokens         time.Duration
	refused                            string // "requests", "tokens" or ""
	retry                              time.Duration
}

// take admits a request of n tokens for model, or refuses it.
func (l *limiter) take(model string, n int64) verdict {
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.windows[model]
	if w == nil {
		if len(l.windows) >= maxLimitedModels {
			return verdict{remainingRequests: l.cfg.Requests, remainingTokens: l.cfg.Tokens}
		}
		w = &window{}
		l.windows[model] = w
	}
	w.expire(now.Add(-l.cfg.Window))
	var v verdict
	switch {
	case l.cfg.Requests > 0 && int64(len(w.uses)) >= l.cfg.Requests:
		v.refused, v.retry = "requests", w.uses[int64(len(w.uses))-l.cfg.Requests].at.Add(l.cfg.Window).Sub(now)
	case l.cfg.Tokens > 0 && w.tokens+n > l.cfg.Tokens:
		v.refused, v.retry = "tokens", l.cfg.Window
		if n <= l.cfg.Tokens {
			// The oldest uses leave the window until n fits.
			free := l.cfg.Tokens - w.tokens
			for _, u := range w.uses {
				if free += u.tokens; free >= n {
					v.retry = u.at.Add(l.cfg.Window).Sub(now)
					break
				}
			}
		}
	default:
		w.uses = append(w.uses, use{at: now, tokens: n})
		w.tokens += n
	}
	v.remainingRequests, v.remainingTokens = max(l.cfg.Requests-int64(len(w.uses)), 0), max(l.cfg.Tokens-w.tokens, 0)
	if len(w.uses) > 0 {
		full := w.uses[len(w.uses)-1].at.Add(l.cfg.Window).Sub(now)
		v.resetRequests, v.resetTokens = full, full
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

// requestTokens is what a request counts against the tokens limit: its
// prompt and the output it will generate, on every choice.
func requestTokens(path string, req *simRequest, out int) int64 {
	var prompt int
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		prompt = chatPromptTokens(req)
	case strings.HasSuffix(path, "/completions"):
		prompt = promptTokens(req.Prompt)
	case strings.HasSuffix(path, "/embeddings"):
		return int64(promptTokens(req.Input))
	default:
		prompt = promptTokens(req.Input) + textTokens(req.Instructions)
	}
	return int64(prompt) + int64(out)*int64(min(max(req.N, 1), maxChoices))
}
