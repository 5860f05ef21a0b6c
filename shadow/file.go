package shadow

import (
	"io"
	"log/slog"
	"math"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
)

// FileLogger returns a logger as the logging section says: records at
// logging.level and above, written to w as JSON or text (logging.format),
// every string clipped (BoundedHandler) since records may quote what
// clients sent.
func FileLogger(w io.Writer, l *config.Logging) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l.Level}
	if l.Format == "text" {
		return slog.New(NewBoundedHandler(slog.NewTextHandler(w, opts)))
	}
	return slog.New(NewBoundedHandler(slog.NewJSONHandler(w, opts)))
}

// FileObserver returns the observer to give admission.WithObserver: the
// decision log of the logging.decisions section writing to log (every
// rejection if rejections is true, would-reject and fail-open decisions
// always, one admitted decision in round(1/sample), max_per_second
// records a second, at most min(max_per_second, DefaultLogBurst) at
// once), followed by obs, typically a metrics.Observer, nil ones skipped.
func FileObserver(l *config.Logging, log *slog.Logger, obs ...admission.Observer) (admission.Observer, error) {
	c := LogConfig{Rate: float64(l.MaxPerSecond), Burst: min(l.MaxPerSecond, DefaultLogBurst), HashSessions: l.HashSessions}
	if l.Rejections {
		c.RejectSample = 1
	}
	if l.DecisionSample > 0 {
		c.AdmitSample = max(1, int(math.Round(1/l.DecisionSample)))
	}
	dlog, err := NewLog(c, WithLogger(log))
	if err != nil {
		return nil, err
	}
	all := []admission.Observer{dlog}
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	return Join(all...), nil
}
