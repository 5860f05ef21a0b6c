package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/weights"
)

// pipeListener is a net.Listener whose connections are in-memory pipes
// (net.Pipe): inside a testing/synctest bubble their deadlines run on
// the bubble's clock, and a write the other end does not read blocks, as
// one to a client that stopped reading does once the socket buffers are
// full.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// dial returns the client end of a new connection.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// handlerTransport answers upstream requests with an http.Handler, in
// memory.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// TestStalledReaderOfAPlainAnswerIsCut: a client that does not read a
// plain (not streamed) answer holds its concurrency permit for exactly
// the client write timeout, and is then cut and the permit released, so
// the next request of its tenant is admitted. The gateway runs in a
// testing/synctest bubble on in-memory connections: the timeout is
// measured on the bubble's clock, to the nanosecond, whatever the
// machine's load.
func TestStalledReaderOfAPlainAnswerIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		f, err := config.Parse("policy.yaml", []byte(`
policies:
  - {name: conc, key: [tenant], algorithm: concurrency, limit: 1}
tenants:
  acme: {api_keys: [`+config.HashKey("sk-acme").String()+`]}
identity: {anonymous: deny}
`))
		if err != nil {
			t.Fatal(err)
		}
		ctl, err := admission.New(f.Config)
		if err != nil {
			t.Fatal(err)
		}
		defer ctl.Close()
		est, err := weights.NewEstimator(weights.Config{})
		if err != nil {
			t.Fatal(err)
		}
		upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			padding := ""
			if r.URL.Path == "/v1/models/big" {
				padding = strings.Repeat("p", 1<<20) // far more than any buffer on the way
			}
			fmt.Fprintf(w, `{"id":%q,"object":"model","padding":%q}`, strings.TrimPrefix(r.URL.Path, "/v1/models/"), padding)
		})
		gw, err := gateway.New(gateway.Config{
			Upstream: "http://upstream.test/v1", Controller: ctl, Estimator: est, File: f,
			Transport: handlerTransport{upstream}, ClientWriteTimeout: timeout, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		e := echo.New()
		gw.Register(e)
		ln := newPipeListener()
		srv := &http.Server{Handler: e, ReadHeaderTimeout: time.Minute}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		inflight := func() int64 { return ctl.Stats()[0].InFlight }
		get := func(conn net.Conn, model string) {
			fmt.Fprintf(conn, "GET /v1/models/%s HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer sk-acme\r\n\r\n", model)
		}
		// status asks for a small answer on a new connection and reads it.
		status := func() int {
			conn := ln.dial()
			defer conn.Close()
			go get(conn, "gpt-4o")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode
		}

		stalled := ln.dial()
		defer stalled.Close()
		go get(stalled, "big") // and never read the answer
		synctest.Wait()
		start := time.Now()
		if n := inflight(); n != 1 {
			t.Fatalf("in flight while the large answer is written = %d; want 1", n)
		}
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if n := inflight(); n != 1 {
			t.Errorf("in flight 1ns before the client write timeout = %d; want 1", n)
		}
		if st := status(); st != http.StatusTooManyRequests {
			t.Errorf("a second request while the stalled reader holds the permit: status %d; want 429", st)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := inflight(); n != 0 {
			t.Errorf("in flight once the client write timeout has passed = %d; want 0 (the stalled reader is cut)", n)
		}
		if st := status(); st != http.StatusOK {
			t.Errorf("the next request once the stalled reader is cut: status %d; want 200", st)
		}
		if d := time.Since(start); d != timeout {
			t.Errorf("the stalled reader was cut after %v; want the client write timeout, %v", d, timeout)
		}
	})
}
