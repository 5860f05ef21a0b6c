package gateway

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/internal/pipenet"
)

// What a running stream has produced and not been charged for is, after
// every chunk, at most its output over the last ChargeInterval: on random
// traffic (chunks at random gaps, of random sizes).
func TestChargingBound(t *testing.T) {
	const interval = 500 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	type chunk struct {
		at     time.Time
		tokens int64
	}
	for run := range 200 {
		start := time.Unix(1000, 0)
		c := charging{interval: interval, last: start}
		now, tokens, chargedAt := start, int64(0), int64(0)
		maxGap := time.Duration(1+rng.IntN(4)) * interval / 2
		var seen []chunk
		for range 500 {
			now = now.Add(time.Duration(rng.Int64N(int64(maxGap))))
			k := rng.Int64N(int64(1 + rng.IntN(40)))
			tokens += k
			seen = append(seen, chunk{now, k})
			if c.due(now) {
				chargedAt = tokens
			}
			var window int64
			for i := len(seen) - 1; i >= 0 && now.Sub(seen[i].at) < interval; i-- {
				window += seen[i].tokens
			}
			if u := tokens - chargedAt; u > window {
				t.Fatalf("run %d at %v: %d tokens uncharged; want at most the last interval's %d", run, now.Sub(start), u, window)
			}
		}
	}
}

// A stream's write that the client does not take is cut after the client
// write timeout, not before and not after more than an eighth of the
// timeout and two ticks; a stream that writes stays uncut past the
// timeout; the watch's goroutine ends with the last stream. In a
// testing/synctest bubble, on in-memory connections: the bounds hold on
// the bubble's clock whatever the machine's load.
func TestStreamWatchBoundsWrites(t *testing.T) {
	synctest.Test(t, testStreamWatchBoundsWrites)
}

func testStreamWatchBoundsWrites(t *testing.T) {
	const timeout = 400 * time.Millisecond
	var sw streamWatch
	type result struct {
		blocked time.Duration // how long the failing write took
		err     error
		alive   time.Duration // how long the stream wrote before
	}
	results := make(chan result, 1)
	ln := pipenet.Listen()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &clientWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: timeout, r: r}
		cw.arm()
		cw.WriteHeader(http.StatusOK)
		var ws watchedStream
		sw.watch(&ws, cw, timeout)
		defer ws.done()
		start := time.Now()
		chunk := make([]byte, 16<<10)
		for {
			began := time.Now()
			ws.begin()
			_, err := cw.Write(chunk)
			if err == nil {
				err = cw.FlushError()
			}
			if err = ws.end(err); err != nil {
				results <- result{time.Since(began), err, began.Sub(start)}
				return
			}
			if r.URL.Query().Get("slow") == "1" && time.Since(start) < 3*timeout {
				time.Sleep(timeout / 4)
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// A client reading slowly, past the timeout in all, is not cut while
	// it reads; then it stops reading and is cut.
	conn, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go conn.Write([]byte("GET /?slow=1 HTTP/1.1\r\nHost: x\r\n\r\n"))
	readFor := time.Now().Add(3 * timeout)
	buf := make([]byte, 64<<10)
	for time.Now().Before(readFor) {
		_ = conn.SetReadDeadline(readFor)
		if _, err := conn.Read(buf); err != nil {
			break
		}
	}
	res := <-results
	var ne net.Error
	if !errors.As(res.err, &ne) || !ne.Timeout() {
		t.Errorf("the cut write's error %v; want a timeout", res.err)
	}
	if res.alive < 2*timeout {
		t.Errorf("the stream was cut after %v of reading; want it alive while its client read (%v)", res.alive, 3*timeout)
	}
	if hi := timeout + timeout/deadlineSlack + 2*watchTick; res.blocked < timeout || res.blocked > hi {
		t.Errorf("the stalled write was cut after %v; want %v to %v", res.blocked, timeout, hi)
	}
	srv.Close()
	synctest.Wait()
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stop != nil || len(sw.open) != 0 {
		t.Errorf("the watch still runs with %d streams", len(sw.open))
	}
	select {
	case <-sw.stopped:
	default:
		t.Error("the watch's goroutine runs after the last stream")
	}
}
