package gateway

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// watchTick is the resolution of the clock the open streams share: a
// stream reads the time of its chunks from it (one atomic load, no clock
// read), and the time a stream is charged, renewed or found idle lags the
// real time by at most this.
const watchTick = 20 * time.Millisecond

// streamWatch serves a gateway's open streams with one goroutine, running
// while at least one stream is open: it keeps a coarse clock for them,
// updated every watchTick, and bounds their client writes. A stream's
// client write does not move the connection's write deadline (a runtime
// timer update, every eighth of the client write timeout per stream);
// instead the stream stamps each write with the time it began, and the
// watch, sweeping the open streams every eighth of the timeout, cuts a
// write still in progress after the timeout by setting the connection's
// write deadline in the past. A stream's write thus gets at least
// Config.ClientWriteTimeout, and at most an eighth of it plus two ticks
// more.
//
// The zero value is ready; the gateway holds one.
type streamWatch struct {
	now atomic.Int64 // the coarse clock, in nanoseconds of base's monotonic reading

	mu      sync.Mutex
	base    time.Time
	open    map[*watchedStream]struct{}
	timeout time.Duration // Config.ClientWriteTimeout
	stop    chan struct{} // closed to end the goroutine; nil while none runs
	stopped chan struct{} // closed when it has ended
}

// watchedStream is an open stream as the watch sees it.
type watchedStream struct {
	w  *streamWatch
	cw *clientWriter // nil when the writer is not the gateway's own
	// writing is the coarse time a client write began, 0 between
	// writes, cutWrite once the watch has cut the write.
	writing atomic.Int64
}

// cutWrite marks a write the watch has cut.
const cutWrite = -1

// watch registers s, an open stream writing to w (the echo response's
// writer) within timeout; the caller must call s.done when the stream
// ends. It starts the watch's goroutine for the first open stream.
func (sw *streamWatch) watch(s *watchedStream, w http.ResponseWriter, timeout time.Duration) {
	*s = watchedStream{w: sw}
	for w != nil {
		if cw, ok := w.(*clientWriter); ok {
			// The watch bounds the stream's writes from now on.
			s.cw = cw
			cw.setWatched(true)
			break
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.open == nil {
		sw.open = make(map[*watchedStream]struct{})
	}
	if sw.stop == nil {
		if sw.stopped != nil {
			// The goroutine of the streams before is ending: it holds no
			// lock and touches no stream once stop is closed.
			<-sw.stopped
		}
		if sw.base.IsZero() {
			sw.base = time.Now()
		}
		sw.now.Store(int64(time.Since(sw.base)))
		sw.stop, sw.stopped = make(chan struct{}), make(chan struct{})
		go sw.run(sw.stop, sw.stopped)
	}
	sw.timeout = timeout
	sw.open[s] = struct{}{}
}

// done unregisters the stream; the connection's write deadline applies
// again to what is written after it (the final event, net/http's end of
// the response). The last open stream stops the watch's goroutine.
func (s *watchedStream) done() {
	sw := s.w
	sw.mu.Lock()
	delete(sw.open, s)
	if len(sw.open) == 0 && sw.stop != nil {
		close(sw.stop)
		sw.stop = nil
	}
	sw.mu.Unlock()
	if s.cw != nil {
		s.cw.setWatched(false)
	}
}

// clock returns the coarse time: the real time, less at most watchTick.
func (s *watchedStream) clock() time.Time {
	return s.w.base.Add(time.Duration(s.w.now.Load()))
}

// begin stamps a client write as begun.
func (s *watchedStream) begin() {
	if s.cw != nil {
		s.writing.Store(max(s.w.now.Load(), 1))
	}
}

// end marks the write begun last as ended, with its error err; a write
// the watch cut for its time ends with errWriteCut.
func (s *watchedStream) end(err error) error {
	if s.cw != nil && s.writing.Swap(0) == cutWrite && err == nil {
		err = errWriteCut
	}
	return err
}

// errWriteCut is the error of a stream write that took longer than the
// client write timeout.
var errWriteCut = &timeoutError{}

type timeoutError struct{}

func (*timeoutError) Error() string   { return "gateway: client write timed out" }
func (*timeoutError) Timeout() bool   { return true }
func (*timeoutError) Temporary() bool { return false }

// run keeps the coarse clock and sweeps the open streams until stop is
// closed.
func (sw *streamWatch) run(stop, stopped chan struct{}) {
	defer close(stopped)
	t := time.NewTicker(watchTick)
	defer t.Stop()
	var swept time.Duration
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Since(sw.base)
		sw.now.Store(int64(now))
		sw.mu.Lock()
		if now-swept >= max(sw.timeout/deadlineSlack, watchTick) {
			swept = now
			for s := range sw.open {
				s.sweep(now)
			}
		}
		sw.mu.Unlock()
	}
}

// sweep cuts the stream's write in progress if it began a timeout ago or
// more (its stamp lags the real start by up to a tick).
func (s *watchedStream) sweep(now time.Duration) {
	began := s.writing.Load()
	if began <= 0 || now-time.Duration(began) < s.w.timeout+watchTick {
		return
	}
	if s.writing.CompareAndSwap(began, cutWrite) {
		// The write in progress fails at once; a write that ended
		// meanwhile sees cutWrite and the stream ends.
		_ = s.cw.rc.SetWriteDeadline(time.Unix(1, 0))
	}
}
