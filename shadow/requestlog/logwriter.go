package requestlog

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
)

// Defaults of WriterConfig.
const (
	// DefaultMaxBytes is the size at which a request log file is
	// rotated.
	DefaultMaxBytes = 64 << 20
	// DefaultMaxFiles is how many rotated files are kept besides
	// the current one.
	DefaultMaxFiles = 5
	// DefaultBuffer is how many records wait for the disk before
	// new ones are dropped.
	DefaultBuffer = 4096
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Path is the file written. Rotated files are Path.1 (the newest) to
	// Path.MaxFiles; older ones are removed.
	Path string
	// MaxBytes is the size a file may reach before it is rotated; zero
	// means DefaultMaxBytes.
	MaxBytes int64
	// MaxFiles bounds the rotated files kept; zero means
	// DefaultMaxFiles.
	MaxFiles int
	// SampleTenants keeps the requests of one tenant in SampleTenants
	// (chosen by a hash of the tenant, the same in every process), all of
	// them for the tenants kept. Zero or one logs every request.
	SampleTenants int
	// HashSessions writes a request's session as its pseudonym
	// (apikey.HashSession) rather than as the id.
	HashSessions bool
	// Buffer bounds the records waiting to be written; when the disk is
	// slower than the traffic, new records are dropped and counted. Zero
	// means DefaultBuffer.
	Buffer int
}

// A Writer writes the request log that replay.Run reads, from live
// traffic: one Record per request, admitted or rejected, with the
// request's identity ids (the key id, never the key), operation, model,
// estimates, actual usage and how long the work ran. It never sees prompt
// or completion text.
//
// Log is cheap and never blocks: it copies the record into a bounded
// buffer that a goroutine of the Writer writes to disk. When the
// buffer is full the record is dropped and counted (Dropped), so a slow
// disk never slows requests. A Writer is safe for concurrent use.
//
// The caller logs each request, rather than an admission.Observer
// assembling records from the controller's events: a Decision carries
// neither the key id, user, address and priority nor the estimates in
// units no policy counts, a request no policy matches produces no event,
// a Settlement has no operation, and no id ties one request's per-policy
// events together. A replay through other limits needs all of that.
//
// A request's record is written when Log is called, once the request
// ended, so the log is in order of the requests' ends: replay it with
// replay.Config.Reorder (admitctl replay --reorder) at least the longest
// request plus queue wait, which puts the records back in arrival order.
//
// With SampleTenants set, only the requests of one tenant in that many are
// logged, each record saying so ("sample": N). Sampling by tenant keeps
// the sampled tenants' traffic whole, so a replay of policies partitioned
// by tenant or key id is exact for them; replay.Run refuses a sampled log for
// candidates with other policies (see Record).
type Writer struct {
	cfg     WriterConfig
	ch      chan Record
	done    chan struct{}
	once    sync.Once
	mu      sync.RWMutex // held for reading by Log, for writing by Close
	closed  bool
	dropped atomic.Uint64
	written atomic.Uint64
	err     error // the first write error, set by the writer goroutine

	f    *os.File
	w    *bufio.Writer
	size int64
	buf  []byte
}

// NewWriter opens (appending) the request log cfg.Path and starts
// writing to it. Close it to flush what is buffered.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	cfg.MaxBytes = cmp.Or(cfg.MaxBytes, DefaultMaxBytes)
	cfg.MaxFiles = cmp.Or(cfg.MaxFiles, DefaultMaxFiles)
	cfg.Buffer = cmp.Or(cfg.Buffer, DefaultBuffer)
	var errs []error
	if cfg.Path == "" {
		errs = append(errs, errors.New("shadow: request log: no path"))
	}
	if cfg.MaxBytes < MaxRecordBytes {
		errs = append(errs, fmt.Errorf("shadow: request log: max bytes must be >= %d, got %d", MaxRecordBytes, cfg.MaxBytes))
	}
	if cfg.MaxFiles < 0 || cfg.Buffer < 0 || cfg.SampleTenants < 0 {
		errs = append(errs, errors.New("shadow: request log: max files, buffer and sample must be >= 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l := &Writer{cfg: cfg, ch: make(chan Record, cfg.Buffer), done: make(chan struct{})}
	if err := l.open(); err != nil {
		return nil, err
	}
	go l.run()
	return l, nil
}

// Log logs one request: r as it was admitted or rejected, when it
// arrived, its actual usage (the zero Usage for a rejected request or
// one settled at its estimate) and how long its work ran once admitted,
// queue wait excluded (zero for a rejected request). A replay admits the
// record at arrived, queues it as the candidate says, and settles it with
// actual after work. Log never blocks; after Close it does nothing.
func (l *Writer) Log(r *admission.Request, arrived time.Time, actual admission.Usage, work time.Duration) {
	l.log(r, arrived, actual, work, false)
}

// LogBeginOnly logs a request that ended before its body was priced (the
// caller refused the body: malformed, too large, unreadable) after
// admission.Controller.Begin admitted it: r as Begin was given it (its
// identity and operation) and when it arrived. Its record is marked
// begin_only (Record.BeginOnly), so that a replay decides it with Begin's
// policies alone, as they decided it live. The body itself is never
// logged. LogBeginOnly never blocks; after Close it does nothing.
func (l *Writer) LogBeginOnly(r *admission.Request, arrived time.Time) {
	l.log(r, arrived, admission.Usage{}, 0, true)
}

// log is Log and LogBeginOnly.
func (l *Writer) log(r *admission.Request, arrived time.Time, actual admission.Usage, work time.Duration, beginOnly bool) {
	if l.cfg.SampleTenants > 1 && !sampled(r.Tenant, l.cfg.SampleTenants) {
		return
	}
	rec := Record{Time: arrived.UTC(), Request: *r, Actual: actual, Duration: min(max(work, 0), MaxRecordDuration), BeginOnly: beginOnly}
	if l.cfg.SampleTenants > 1 {
		rec.Sample = l.cfg.SampleTenants
	}
	if l.cfg.HashSessions && r.Session != "" {
		rec.Session = apikey.HashSession(r.Session)
	}
	if len(r.Units) > 0 {
		rec.Units = slices.Clone(r.Units)
		slices.SortFunc(rec.Units, byUnit)
	}
	if len(actual.Units) > 0 {
		rec.Actual.Units = slices.Clone(actual.Units)
		slices.SortFunc(rec.Actual.Units, byUnit)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return
	}
	select {
	case l.ch <- rec:
	default:
		l.dropped.Add(1)
	}
}

// byUnit orders amounts by unit, as records hold them.
func byUnit(a, b admission.UnitAmount) int { return cmp.Compare(a.Unit, b.Unit) }

// sampled reports whether tenant is among the one in n tenants logged.
func sampled(tenant string, n int) bool {
	h := fnv.New64a()
	h.Write([]byte(tenant))
	return h.Sum64()%uint64(n) == 0
}

// Dropped returns how many records were dropped because the buffer was
// full or writing failed: a counter for a metric.
func (l *Writer) Dropped() uint64 { return l.dropped.Load() }

// Written returns how many records were written: a counter for a metric.
func (l *Writer) Written() uint64 { return l.written.Load() }

// Close writes the records still buffered, closes the file and returns
// the first error writing met. Log calls after Close do nothing.
func (l *Writer) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.ch)
		l.mu.Unlock()
	})
	<-l.done
	return l.err
}

// run writes records until the log is closed, flushing whenever the
// buffer is empty so that a record reaches the disk soon after it was
// logged.
func (l *Writer) run() {
	defer close(l.done)
	for rec := range l.ch {
		l.write(&rec)
		if len(l.ch) == 0 && l.w != nil {
			l.fail(l.w.Flush())
		}
	}
	if l.w != nil {
		l.fail(l.w.Flush())
		l.fail(l.f.Close())
	}
}

func (l *Writer) write(rec *Record) {
	l.buf = append(rec.AppendJSON(l.buf[:0]), '\n')
	if l.size > 0 && l.size+int64(len(l.buf)) > l.cfg.MaxBytes {
		l.fail(l.rotate())
	}
	if l.w == nil {
		l.dropped.Add(1)
		return
	}
	if _, err := l.w.Write(l.buf); err != nil {
		l.fail(err)
		l.dropped.Add(1)
		return
	}
	l.size += int64(len(l.buf))
	l.written.Add(1)
}

// rotate renames Path.k to Path.k+1 (removing the oldest), Path to Path.1,
// and opens a new Path.
func (l *Writer) rotate() error {
	err := errors.Join(l.w.Flush(), l.f.Close())
	l.w, l.f = nil, nil
	p := l.cfg.Path
	name := func(k int) string { return fmt.Sprintf("%s.%d", p, k) }
	if l.cfg.MaxFiles == 0 {
		err = errors.Join(err, os.Remove(p))
	} else {
		os.Remove(name(l.cfg.MaxFiles))
		for k := l.cfg.MaxFiles - 1; k >= 1; k-- {
			if rerr := os.Rename(name(k), name(k+1)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
		err = errors.Join(err, os.Rename(p, name(1)))
	}
	return errors.Join(err, l.open())
}

func (l *Writer) open() error {
	f, err := os.OpenFile(l.cfg.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("shadow: request log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("shadow: request log: %w", err)
	}
	l.f, l.w, l.size = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	return nil
}

// fail keeps the first error met.
func (l *Writer) fail(err error) {
	if err != nil && l.err == nil {
		l.err = err
	}
}
