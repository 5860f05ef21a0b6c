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
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/internal/pipenet"
	"github.com/sluicehq/sluice/weights"
)

// handlerTransport answers upstream requests with an http.Handler, in
// memory.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	t.h.ServeHTTP(w, r)
	return w.Result(), nil
}

// pipeGateway is a gateway served over in-memory connections, for tests
// that run in a testing/synctest bubble: every deadline and timer of the
// gateway and its server is on the bubble's clock.
type pipeGateway struct {
	ln       *pipenet.Listener
	ctl      *admission.Controller
	upstream atomic.Int32 // requests the upstream received
}

// startPipeGateway starts a gateway with one concurrency policy of limit
// 1 for tenant acme (key sk-acme) and an in-memory upstream whose
// /v1/models/big answer is far larger than any buffer on the way; edit
// adjusts its Config. It must be called inside a bubble; the bubble's end
// stops it.
func startPipeGateway(t *testing.T, edit func(*gateway.Config)) *pipeGateway {
	t.Helper()
	f, err := config.Parse("policy.yaml", []byte(`
policies:
  - {name: conc, key: [tenant], algorithm: concurrency, limit: 1}
tenants:
  acme: {api_keys: [`+apikey.Sum("sk-acme").String()+`]}
identity: {anonymous: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	pg := &pipeGateway{ln: pipenet.Listen()}
	if pg.ctl, err = admission.New(f.Config); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.ctl.Close() })
	est, err := weights.NewEstimator(weights.Config{})
	if err != nil {
		t.Fatal(err)
	}
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pg.upstream.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			fmt.Fprint(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
			return
		}
		padding := ""
		if r.URL.Path == "/v1/models/big" {
			padding = strings.Repeat("p", 1<<20)
		}
		fmt.Fprintf(w, `{"id":%q,"object":"model","padding":%q}`, strings.TrimPrefix(r.URL.Path, "/v1/models/"), padding)
	})
	cfg := gateway.Config{Upstream: "http://upstream.test/v1"}
	edit(&cfg)
	gw, err := gateway.New(pg.ctl, est, f, cfg, gateway.WithTransport(handlerTransport{upstream}), gateway.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	gw.Register(e)
	srv := &http.Server{Handler: e, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(pg.ln) }()
	t.Cleanup(func() { srv.Close() })
	return pg
}

// dial opens a connection to the gateway.
func (pg *pipeGateway) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := pg.ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// inflight returns the requests holding the concurrency policy's permit.
func (pg *pipeGateway) inflight() int64 { return pg.ctl.Stats()[0].InFlight }

// status asks for a small answer on a new connection and reads it.
func (pg *pipeGateway) status(t *testing.T) int {
	t.Helper()
	conn := pg.dial(t)
	defer conn.Close()
	go fmt.Fprint(conn, "GET /v1/models/gpt-4o HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer sk-acme\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
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
		pg := startPipeGateway(t, func(c *gateway.Config) { c.ClientWriteTimeout = timeout })
		stalled := pg.dial(t)
		defer stalled.Close()
		// Asks for the large answer, and never reads it.
		go fmt.Fprint(stalled, "GET /v1/models/big HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer sk-acme\r\n\r\n")
		synctest.Wait()
		start := time.Now()
		if n := pg.inflight(); n != 1 {
			t.Fatalf("in flight while the large answer is written = %d; want 1", n)
		}
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if n := pg.inflight(); n != 1 {
			t.Errorf("in flight 1ns before the client write timeout = %d; want 1", n)
		}
		if st := pg.status(t); st != http.StatusTooManyRequests {
			t.Errorf("a second request while the stalled reader holds the permit: status %d; want 429", st)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := pg.inflight(); n != 0 {
			t.Errorf("in flight once the client write timeout has passed = %d; want 0 (the stalled reader is cut)", n)
		}
		if st := pg.status(t); st != http.StatusOK {
			t.Errorf("the next request once the stalled reader is cut: status %d; want 200", st)
		}
		if d := time.Since(start); d != timeout {
			t.Errorf("the stalled reader was cut after %v; want the client write timeout, %v", d, timeout)
		}
	})
}

// readUntilClosed reads the answer on conn and then waits for the
// connection to end; it returns the status, and when (on the bubble's
// clock, from start) the answer came and the connection ended.
func readUntilClosed(t *testing.T, conn net.Conn, start time.Time) (status int, answered, ended time.Duration) {
	t.Helper()
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	answered = time.Since(start)
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the %s answer the connection is not closed: %v", resp.Status, err)
	}
	return resp.StatusCode, answered, time.Since(start)
}

// TestSlowAndUnwantedBodies: a body sent at one byte a second is cut with
// a 408 when the body read timeout has passed since its headers, to the
// nanosecond on the bubble's clock; a request refused before its body is
// read (unknown key, no key, a body declared too large) has its
// connection closed at once, not drained nor left until the body read
// timeout.
func TestSlowAndUnwantedBodies(t *testing.T) {
	head := func(key string, length int) string {
		return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, length)
	}
	t.Run("one byte a second", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const timeout = 300 * time.Millisecond
			pg := startPipeGateway(t, func(c *gateway.Config) { c.BodyReadTimeout = timeout })
			conn := pg.dial(t)
			defer conn.Close()
			start := time.Now()
			writing := make(chan struct{})
			go func() {
				defer close(writing)
				if _, err := io.WriteString(conn, head("sk-acme", 100)+"{"); err != nil {
					return
				}
				for range 10 {
					time.Sleep(time.Second)
					if _, err := io.WriteString(conn, " "); err != nil {
						return
					}
				}
			}()
			// The connection ends after the answer, when net/http has
			// given the client time to read it.
			st, answered, _ := readUntilClosed(t, conn, start)
			if st != http.StatusRequestTimeout || answered != timeout {
				t.Errorf("slow body: answer %d after %v; want 408 after the body read timeout, %v", st, answered, timeout)
			}
			if n := pg.upstream.Load(); n != 0 {
				t.Errorf("the upstream received %d requests; want 0", n)
			}
			conn.Close()
			<-writing // its next write fails
		})
	})
	for _, tc := range []struct {
		name, head string
		status     int
	}{
		{"unknown key", head("sk-unknown", 1000), http.StatusUnauthorized},
		{"no key", strings.Replace(head("", 1000), "Authorization: Bearer \r\n", "", 1), http.StatusUnauthorized},
		{"declared too large", head("sk-acme", 64<<20), http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const timeout = time.Minute
				pg := startPipeGateway(t, func(c *gateway.Config) { c.BodyReadTimeout = timeout })
				conn := pg.dial(t)
				defer conn.Close()
				start := time.Now()
				go io.WriteString(conn, tc.head)
				// Waiting for the body (to drain it) would keep the
				// connection until the body read timeout; closing it
				// takes only net/http's pause for the client to read
				// the answer (half a second).
				if st, answered, ended := readUntilClosed(t, conn, start); st != tc.status || answered != 0 || ended >= timeout {
					t.Errorf("answer %d after %v, connection ended after %v; want %d at once, and the end before the body read timeout %v",
						st, answered, ended, tc.status, timeout)
				}
			})
		})
	}
}
