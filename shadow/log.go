package shadow

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/limits"
)

// Defaults of LogConfig.
const (
	// DefaultLogRate is how many records per second the decision log
	// writes at most, on average.
	DefaultLogRate = 10
	// DefaultLogBurst is how many records it may write at once.
	DefaultLogBurst = 50
)

// LogConfig configures a decision log.
type LogConfig struct {
	// Rate is the most records per second, on average; zero means
	// DefaultLogRate.
	Rate float64
	// Burst is the most records written back to back; zero means
	// DefaultLogBurst.
	Burst int
	// RejectSample logs one enforced refusal (rejected, timeout,
	// fail_closed) in RejectSample; zero logs none, 1 logs all.
	// Would-reject and fail-open decisions are always logged.
	RejectSample int
	// AdmitSample logs one admitted decision in AdmitSample (at the log's
	// own level); zero, the default, logs none, 1 logs all. Admitted
	// decisions share the rate limit with the others, so sampling them
	// never crowds refusals out for long.
	AdmitSample int
	// Level is the level of would-reject and fail-open records; refusals
	// are logged one level higher. The zero value is slog.LevelInfo.
	Level slog.Level
	// HashSessions writes a decision's session as its pseudonym
	// (apikey.HashSession) rather than as the id.
	HashSessions bool
}

// An Option configures a Log or a Recorder.
type Option func(*options)

type options struct {
	clock  admission.Clock
	logger *slog.Logger
}

// WithClock sets the clock; use the controller's. The default is
// admission.SystemClock.
func WithClock(c admission.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger a Log writes to; the default is
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func buildOptions(opts []Option) options {
	o := options{clock: admission.SystemClock{}, logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// A Log is an admission.Observer that writes decisions as structured
// slog records: every would-reject (what a shadow policy would have
// refused), every fail-open, a sample of enforced refusals and, when
// asked, a sample of admitted decisions. Each
// record carries the policy, mode, decision, reason, tenant, operation,
// model, cost and unit, the retry-after, the queue wait and the
// partition's limit figures; never credentials (the core has none to
// give) nor request content. Every string comes from the request and is
// bounded with Clip, so one record is at most MaxDecisionBytes whatever a
// caller sends.
//
// Durations are numbers of seconds, to the millisecond, in fields whose
// names end in "_s": retry_after_s, queue_wait_s, reset_s and window_s
// (retry_after_s=11.955 for a wait of 11.954624567 s, never raw
// nanoseconds). A retry_after_s of -1 means waiting cannot help
// (limits.Never). A text handler writes a million seconds or more in
// exponent form (2.6784e+06 for a 31-day window), which still parses as
// a number.
//
// The log limits itself with a token bucket so that a flood of refusals
// cannot flood the log: records over the rate are dropped and counted, the
// next record written carries the number dropped since the previous one
// ("suppressed"), and Suppressed reports the total.
type Log struct {
	admission.NopObserver
	cfg    LogConfig
	opts   options
	sample atomic.Uint64 // refusals seen, for RejectSample
	admits atomic.Uint64 // admitted decisions seen, for AdmitSample

	mu     sync.Mutex
	tokens float64
	last   time.Time

	suppressed atomic.Uint64 // total
	pending    atomic.Uint64 // since the last record written
}

// NewLog returns a decision log.
func NewLog(cfg LogConfig, opts ...Option) (*Log, error) {
	if cfg.Rate == 0 {
		cfg.Rate = DefaultLogRate
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultLogBurst
	}
	var errs []error
	if cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) {
		errs = append(errs, errors.New("shadow: log rate must be a positive number"))
	}
	if cfg.Burst < 0 {
		errs = append(errs, errors.New("shadow: log burst must be >= 0"))
	}
	if cfg.RejectSample < 0 {
		errs = append(errs, errors.New("shadow: reject sample must be >= 0"))
	}
	if cfg.AdmitSample < 0 {
		errs = append(errs, errors.New("shadow: admit sample must be >= 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l := &Log{cfg: cfg, opts: buildOptions(opts)}
	l.tokens = float64(cfg.Burst)
	return l, nil
}

// Suppressed returns how many records were dropped by the log's rate limit.
func (l *Log) Suppressed() uint64 { return l.suppressed.Load() }

// Decision logs would-reject and fail-open decisions, a sample of enforced
// refusals and a sample of admitted decisions.
func (l *Log) Decision(d *admission.Decision) {
	level := l.cfg.Level
	switch d.Outcome {
	case admission.Admitted:
		n := uint64(l.cfg.AdmitSample)
		if n == 0 || (n > 1 && l.admits.Add(1)%n != 0) {
			return
		}
	case admission.WouldReject, admission.FailOpen:
	case admission.Rejected, admission.Timeout, admission.FailClosed:
		n := uint64(l.cfg.RejectSample)
		if n == 0 || (n > 1 && l.sample.Add(1)%n != 0) {
			return
		}
		level += 4
	default:
		return
	}
	if !l.allow() {
		l.suppressed.Add(1)
		l.pending.Add(1)
		return
	}
	attrs := [...]slog.Attr{
		slog.String("policy", Clip(d.Policy)),
		slog.String("mode", d.Mode.String()),
		slog.String("decision", d.Outcome.String()),
		slog.String("reason", d.Reason.String()),
		slog.String("tenant", Clip(d.Tenant)),
		slog.String("operation", Clip(d.Operation)),
		slog.String("model", Clip(d.Model)),
		slog.Int64("cost", d.Cost),
		slog.String("unit", string(d.Unit)),
		slog.Float64("retry_after_s", seconds(d.RetryAfter)),
		slog.Float64("queue_wait_s", seconds(d.QueueWait)),
		slog.Int64("limit", d.Limit),
		slog.Int64("remaining", d.Remaining),
		slog.Float64("reset_s", seconds(d.Reset)),
		slog.Float64("window_s", seconds(d.Window)),
		slog.Uint64("suppressed", l.pending.Swap(0)),
		{}, // the session, when the request has one
	}
	msg := "admission decision"
	if d.Outcome == admission.WouldReject {
		msg = "shadow policy would reject"
	}
	// The request's context, so that a handler that joins logs to traces
	// (oteltrace.LogHandler) adds its trace and span ids.
	ctx := d.Context
	if ctx == nil {
		ctx = context.Background()
	}
	all := attrs[:len(attrs)-1]
	if s := d.Session; s != "" {
		if l.cfg.HashSessions {
			s = apikey.HashSession(s)
		}
		attrs[len(attrs)-1], all = slog.String("session", Clip(s)), attrs[:]
	}
	l.opts.logger.LogAttrs(ctx, level, msg, all...)
}

// seconds returns d as the decision log writes it: seconds rounded to the
// millisecond (11.955 for 11.954624567 s), and -1 for limits.Never.
func seconds(d time.Duration) float64 {
	if d == limits.Never {
		return -1
	}
	return float64(d.Round(time.Millisecond)) / float64(time.Second)
}

// allow takes a token from the log's bucket.
func (l *Log) allow() bool {
	now := l.opts.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		l.tokens = min(float64(l.cfg.Burst), l.tokens+now.Sub(l.last).Seconds()*l.cfg.Rate)
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

var _ admission.Observer = (*Log)(nil)

// Bounds of what a decision record or a BoundedHandler writes.
const (
	// MaxLogValue is the longest string value written, in bytes; a longer
	// one is cut at a character boundary and ends with "...".
	MaxLogValue = 256
	// MaxDecisionBytes is the most one decision record takes as a JSON or
	// text line: its seven strings clipped to MaxLogValue, each doubled
	// at worst by escaping, and its fixed fields.
	MaxDecisionBytes = 4 << 10
)

// Clip bounds a string taken from a request for a log line: invalid UTF-8
// and control characters (which a log reader's terminal would interpret,
// and which escaping multiplies) become '?', and a value over MaxLogValue
// bytes is cut at a character boundary and ends with "...". A short
// printable string is returned as is, without allocating.
func Clip(s string) string {
	clean := len(s) <= MaxLogValue
	for i := 0; clean && i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x7f {
			clean = false
		}
	}
	if clean {
		return s
	}
	// Replacing never lengthens a string, so only a long one is cut.
	const ellipsis = "..."
	long := len(s) > MaxLogValue
	var b strings.Builder
	b.Grow(min(len(s), MaxLogValue))
	for _, r := range s {
		n := utf8.RuneLen(r)
		if r == utf8.RuneError || r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			r, n = '?', 1
		}
		if long && b.Len()+n > MaxLogValue-len(ellipsis) {
			b.WriteString(ellipsis)
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// BoundedHandler wraps a slog.Handler so that no record it passes on
// carries an unbounded string: the message, every string attribute, every
// error and every other value formatted as text go through Clip, in groups
// too. Put it under a program's logger when records may carry values
// taken from requests (an error quoting a client's input).
type BoundedHandler struct{ h slog.Handler }

// NewBoundedHandler returns h behind Clip.
func NewBoundedHandler(h slog.Handler) *BoundedHandler { return &BoundedHandler{h: h} }

// Enabled implements slog.Handler.
func (b *BoundedHandler) Enabled(ctx context.Context, l slog.Level) bool { return b.h.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (b *BoundedHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Clip(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(clipAttr(a))
		return true
	})
	return b.h.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (b *BoundedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	cs := make([]slog.Attr, len(as))
	for i, a := range as {
		cs[i] = clipAttr(a)
	}
	return &BoundedHandler{h: b.h.WithAttrs(cs)}
}

// WithGroup implements slog.Handler.
func (b *BoundedHandler) WithGroup(name string) slog.Handler {
	return &BoundedHandler{h: b.h.WithGroup(Clip(name))}
}

func clipAttr(a slog.Attr) slog.Attr {
	a.Key = Clip(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Clip(v.String()))
	case slog.KindGroup:
		g := v.Group()
		cs := make([]slog.Attr, len(g))
		for i, x := range g {
			cs[i] = clipAttr(x)
		}
		a.Value = slog.GroupValue(cs...)
	case slog.KindAny:
		a.Value = slog.StringValue(Clip(v.String()))
	default:
		a.Value = v
	}
	return a
}
