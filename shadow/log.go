package shadow

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
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
	// Level is the level of would-reject and fail-open records; refusals
	// are logged one level higher. The zero value is slog.LevelInfo.
	Level slog.Level
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
// refused), every fail-open, and a sample of enforced refusals. Each
// record carries the policy, mode, decision, reason, tenant, operation,
// model, cost and unit, the retry-after and the partition's limit figures;
// never credentials (the core has none to give) nor request content.
//
// The log limits itself with a token bucket so that a flood of refusals
// cannot flood the log: records over the rate are dropped and counted, the
// next record written carries the number dropped since the previous one
// ("suppressed"), and Suppressed reports the total.
type Log struct {
	admission.NopObserver
	cfg    LogConfig
	opts   options
	sample atomic.Uint64

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
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l := &Log{cfg: cfg, opts: buildOptions(opts)}
	l.tokens = float64(cfg.Burst)
	return l, nil
}

// Suppressed returns how many records were dropped by the log's rate limit.
func (l *Log) Suppressed() uint64 { return l.suppressed.Load() }

// Decision logs would-reject and fail-open decisions and a sample of
// enforced refusals.
func (l *Log) Decision(d *admission.Decision) {
	level := l.cfg.Level
	switch d.Outcome {
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
		slog.String("policy", d.Policy),
		slog.String("mode", d.Mode.String()),
		slog.String("decision", d.Outcome.String()),
		slog.String("reason", d.Reason.String()),
		slog.String("tenant", d.Tenant),
		slog.String("operation", d.Operation),
		slog.String("model", d.Model),
		slog.Int64("cost", d.Cost),
		slog.String("unit", string(d.Unit)),
		slog.Duration("retry_after", d.RetryAfter),
		slog.Int64("limit", d.Limit),
		slog.Int64("remaining", d.Remaining),
		slog.Duration("reset", d.Reset),
		slog.Duration("window", d.Window),
		slog.Uint64("suppressed", l.pending.Swap(0)),
	}
	msg := "admission decision"
	if d.Outcome == admission.WouldReject {
		msg = "shadow policy would reject"
	}
	l.opts.logger.LogAttrs(context.Background(), level, msg, attrs[:]...)
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
