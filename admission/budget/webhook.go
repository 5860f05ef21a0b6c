package budget

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

// The headers of a webhook POST.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>".
	SignatureHeader = "Sluice-Signature"
	// EventIDHeader carries the Warning's ID.
	EventIDHeader = "Sluice-Event-Id"
)

// MinSecret is the shortest signing secret accepted, in bytes.
const MinSecret = 16

// webhookWorkers deliver warnings concurrently, so one slow receiver
// call does not hold up every other warning.
const webhookWorkers = 4

// WebhookConfig says where and how warnings are delivered. NewWebhook
// and SetConfig check it.
type WebhookConfig struct {
	// URL receives the POSTs; empty turns delivery off (Notify drops
	// nothing and sends nothing).
	URL string
	// Secret signs every attempt; at least MinSecret bytes.
	Secret []byte
	// Timeout bounds each attempt, response body included.
	Timeout time.Duration
	// Attempts is the most attempts per warning (at least 1).
	Attempts int
	// Backoff is the wait before the first retry, doubled for each
	// later one up to MaxBackoff; each wait is drawn in [d/2, d].
	Backoff    time.Duration
	MaxBackoff time.Duration
	// Queue bounds the warnings waiting for delivery; NewWebhook reads
	// it, SetConfig ignores it.
	Queue int
}

func (c *WebhookConfig) check() error {
	if c.URL == "" {
		return nil
	}
	var errs []error
	if len(c.Secret) < MinSecret {
		errs = append(errs, fmt.Errorf("the signing secret must have at least %d bytes, got %d", MinSecret, len(c.Secret)))
	}
	if c.Timeout <= 0 || c.Attempts < 1 || c.Backoff <= 0 || c.MaxBackoff < c.Backoff {
		errs = append(errs, fmt.Errorf("timeout %v, attempts %d, backoff %v, max backoff %v: want all positive and backoff <= max backoff",
			c.Timeout, c.Attempts, c.Backoff, c.MaxBackoff))
	}
	if !strings.HasPrefix(c.URL, "http://") && !strings.HasPrefix(c.URL, "https://") {
		errs = append(errs, errors.New("the URL must be http:// or https://"))
	} else if u, err := url.Parse(c.URL); err != nil || u.Host == "" {
		// Not err itself: it holds the URL whole, password included.
		errs = append(errs, fmt.Errorf("the URL %q is not a valid URL", config.RedactURL(c.URL)))
	}
	return errors.Join(errs...)
}

// WebhookStats counts a Webhook's attempts.
type WebhookStats struct {
	// Delivered counts warnings the receiver accepted (2xx).
	Delivered uint64
	// Retried counts failed attempts followed by another.
	Retried uint64
	// Failed counts warnings given up on: attempts exhausted or a status
	// that retrying cannot change.
	Failed uint64
	// Dropped counts warnings that found the queue full, or the webhook
	// closed.
	Dropped uint64
}

// A Webhook delivers warnings to an HTTP receiver in the background: see
// the package documentation for the body, the signature and the retries.
type Webhook struct {
	cfg    atomic.Pointer[WebhookConfig]
	queue  chan Warning
	client *http.Client
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closing atomic.Bool  // Shutdown or Close began: Notify drops
	pending atomic.Int64 // warnings queued or being delivered

	delivered, retried, failed, dropped atomic.Uint64
}

// NewWebhook starts a Webhook's workers; Close stops them. Only
// WithLogger applies.
func NewWebhook(cfg WebhookConfig, opts ...Option) (*Webhook, error) {
	if cfg.Queue < 1 {
		return nil, fmt.Errorf("budget: webhook queue must be >= 1, got %d", cfg.Queue)
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	h := &Webhook{queue: make(chan Warning, cfg.Queue), log: o.log}
	if h.log == nil {
		h.log = slog.Default()
	}
	if err := h.SetConfig(cfg); err != nil {
		return nil, err
	}
	h.client = &http.Client{
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: webhookWorkers,
			IdleConnTimeout:     90 * time.Second,
		},
		// A redirect is not followed: the signed body goes only where the
		// file says.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	for range webhookWorkers {
		h.wg.Add(1)
		go h.work()
	}
	return h, nil
}

// SetConfig changes where and how later attempts deliver (not the queue's
// size).
func (h *Webhook) SetConfig(cfg WebhookConfig) error {
	if err := cfg.check(); err != nil {
		return fmt.Errorf("budget: webhook: %w", err)
	}
	cfg.Secret = bytes.Clone(cfg.Secret)
	h.cfg.Store(&cfg)
	return nil
}

// Notify queues w for delivery without waiting: when the queue is full
// (or the webhook closed) w is dropped and counted.
func (h *Webhook) Notify(w Warning) {
	if h.cfg.Load().URL == "" {
		return
	}
	if h.closing.Load() {
		h.dropped.Add(1)
		return
	}
	h.pending.Add(1)
	select {
	case h.queue <- w:
	default:
		h.pending.Add(-1)
		h.dropped.Add(1)
	}
}

// Stats returns the counts so far.
func (h *Webhook) Stats() WebhookStats {
	return WebhookStats{Delivered: h.delivered.Load(), Retried: h.retried.Load(), Failed: h.failed.Load(), Dropped: h.dropped.Load()}
}

// Shutdown stops taking warnings and delivers those queued or under way
// until they are done or ctx ends, then closes the webhook.
func (h *Webhook) Shutdown(ctx context.Context) error {
	h.closing.Store(true)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for h.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), h.Close())
		case <-tick.C:
		}
	}
	return h.Close()
}

// Close stops the workers, cutting short an attempt or a backoff under
// way; the warnings still queued are counted as dropped.
func (h *Webhook) Close() error {
	h.closing.Store(true)
	h.cancel()
	h.wg.Wait()
	h.dropped.Add(uint64(len(h.queue)))
	h.client.CloseIdleConnections()
	return nil
}

func (h *Webhook) work() {
	defer h.wg.Done()
	for {
		select {
		case <-h.ctx.Done():
			return
		case w := <-h.queue:
			h.deliver(w)
			h.pending.Add(-1)
		}
	}
}

// deliver tries w until it is accepted, attempts run out, or the
// webhook closes.
func (h *Webhook) deliver(w Warning) {
	body, err := json.Marshal(w)
	if err != nil { // a Warning always encodes; guard anyway
		h.failed.Add(1)
		return
	}
	for attempt := 1; ; attempt++ {
		cfg := h.cfg.Load()
		if cfg.URL == "" {
			return
		}
		status, err := h.attempt(cfg, w.ID, body)
		if err == nil && status >= 200 && status < 300 {
			h.delivered.Add(1)
			return
		}
		retry := err != nil || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
		if !retry || attempt >= cfg.Attempts || h.ctx.Err() != nil {
			h.failed.Add(1)
			h.log.LogAttrs(h.ctx, slog.LevelWarn, "budget webhook delivery failed",
				slog.String("id", w.ID), slog.String("policy", w.Policy), slog.String("tenant", w.Tenant),
				slog.Int("attempts", attempt), slog.Int("status", status), slog.Any("err", err))
			return
		}
		h.retried.Add(1)
		t := time.NewTimer(backoff(cfg, attempt))
		select {
		case <-h.ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// backoff is the wait after the attempt-th failed attempt: Backoff ×
// 2^(attempt-1), at most MaxBackoff, drawn in [d/2, d].
func backoff(cfg *WebhookConfig, attempt int) time.Duration {
	d := cfg.MaxBackoff
	if attempt <= 32 {
		d = min(cfg.Backoff<<(attempt-1), cfg.MaxBackoff)
		if d <= 0 { // the shift overflowed
			d = cfg.MaxBackoff
		}
	}
	return d/2 + rand.N(d/2+1)
}

// attempt POSTs body once, within the attempt's deadline, and returns
// the response's status.
func (h *Webhook) attempt(cfg *WebhookConfig, id string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(h.ctx, cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-budget/1")
	req.Header.Set(EventIDHeader, id)
	req.Header.Set(SignatureHeader, Sign(cfg.Secret, time.Now(), body))
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, hideURL(err, req.URL)
	}
	// Read a little of the answer so the connection can be reused; the
	// deadline covers it.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// hideURL returns err, a failed request's, naming only the scheme and the
// host of u: a receiver's path or query may be its secret (chat
// services' incoming-webhook URLs are), and the error goes to the log.
func hideURL(err error, u *url.URL) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%s %s://%s: %w", ue.Op, u.Scheme, u.Host, ue.Err)
}

// Sign returns the Sluice-Signature value of body sent at t:
// "t=<unix seconds>,v1=<hex of HMAC-SHA256(secret, "<t>." + body)>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// ErrSignature is the error of Verify (matched with errors.Is).
var ErrSignature = errors.New("budget: webhook signature does not verify")

// Verify checks a Sluice-Signature header against the raw body received
// at now: one of its v1 values (several are allowed, for a secret
// rotation) must be the HMAC-SHA256 of its t and the body under secret,
// compared in constant time, and t must be within tolerance of now, so
// that a captured request cannot be replayed later.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(header) > 1024 {
		return fmt.Errorf("%w: header too long", ErrSignature)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want t=<unix seconds>,v1=<hex>", ErrSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %v from now, more than the tolerance %v", ErrSignature, d.Round(time.Second), tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 matches", ErrSignature)
}
