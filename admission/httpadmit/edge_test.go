package httpadmit_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/bodywatch"
	"github.com/sluicehq/sluice/internal/pipenet"
)

// bodyHandler is the middleware, around a handler that answers "ok",
// whose WithRequest function reads the body (as a cost estimator does)
// and prices the request at the number in its "cost" header.
func bodyHandler(t *testing.T, opts ...httpadmit.Option) http.Handler {
	t.Helper()
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	opts = append([]httpadmit.Option{
		httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{Keys: keys}),
		httpadmit.WithLogger(slog.New(slog.DiscardHandler)),
		httpadmit.WithRequest(func(r *http.Request, req *admission.Request) error {
			if _, err := io.ReadAll(r.Body); err != nil {
				return err
			}
			_, err := fmt.Sscan(r.Header.Get("Cost"), &req.Tokens)
			return err
		}),
	}, opts...)
	mw, err := httpadmit.New(ctl, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
}

// bodyServer serves bodyHandler on a loopback port.
func bodyServer(t *testing.T, opts ...httpadmit.Option) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(bodyHandler(t, opts...))
	t.Cleanup(srv.Close)
	return srv
}

// pipeBodyServer serves bodyHandler on in-memory connections, for a test
// in a testing/synctest bubble: the body timeout and net/http's own
// timers run on the bubble's clock. It returns a connection to it.
func pipeBodyServer(t *testing.T, opts ...httpadmit.Option) net.Conn {
	t.Helper()
	ln := pipenet.Listen()
	srv := &http.Server{Handler: bodyHandler(t, opts...), ReadHeaderTimeout: time.Hour}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	conn, err := ln.Dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// The body limit holds without WithMaxBody, before the WithRequest
// function reads the body, declared or chunked; a negative cost is
// refused.
func TestBodyLimitAndAmountsBeforeAdmission(t *testing.T) {
	srv := bodyServer(t)
	send := func(body io.Reader, cost string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/x", body)
		req.Header.Set("Authorization", "Bearer "+keySteady)
		req.Header.Set("Cost", cost)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	big := strings.Repeat("x", httpadmit.DefaultMaxBody+1)
	for name, tc := range map[string]struct {
		body io.Reader
		cost string
		want int
	}{
		"declared over the default limit": {strings.NewReader(big), "1", http.StatusRequestEntityTooLarge},
		"chunked over the default limit":  {io.MultiReader(strings.NewReader(big)), "1", http.StatusRequestEntityTooLarge},
		"within the limit":                {strings.NewReader("{}"), "10", http.StatusOK},
		"negative tokens":                 {strings.NewReader("{}"), "-5", http.StatusBadRequest},
		"the most negative tokens":        {strings.NewReader("{}"), "-9223372036854775808", http.StatusBadRequest},
		// Saturated, then larger than the limit: refused as a decision.
		"the most tokens": {strings.NewReader("{}"), "9223372036854775807", http.StatusTooManyRequests},
	} {
		if got := send(tc.body, tc.cost); got != tc.want {
			t.Errorf("%s: status %d; want %d", name, got, tc.want)
		}
	}
}

// answerThenEOF reads one answer from conn and checks the connection then
// ends; it returns the status and how long after start the answer came.
func answerThenEOF(t *testing.T, conn net.Conn, start time.Time) (int, time.Duration) {
	t.Helper()
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	answered := time.Since(start)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after %s the connection did not end: %v", resp.Status, err)
	}
	return resp.StatusCode, answered
}

// A body sent a byte a second is cut at the body timeout with 408; a
// request with an unknown key is refused before its body arrives and its
// connection closed rather than drained. Both run in a testing/synctest
// bubble on in-memory connections, so the durations are the bubble's, to
// the nanosecond, however busy the machine.
func TestSlowAndUnwantedBodies(t *testing.T) {
	const bodyTimeout = 200 * time.Millisecond
	head := "POST /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nCost: 1\r\nContent-Length: 100\r\n\r\n"

	synctest.Test(t, func(t *testing.T) {
		conn := pipeBodyServer(t, httpadmit.WithBodyTimeout(bodyTimeout))
		start := time.Now()
		sending := make(chan struct{})
		go func() {
			defer close(sending)
			if _, err := fmt.Fprintf(conn, head+"{", keySteady); err != nil {
				return
			}
			for range 5 {
				time.Sleep(time.Second)
				if _, err := io.WriteString(conn, " "); err != nil {
					return
				}
			}
		}()
		st, answered := answerThenEOF(t, conn, start)
		if st != http.StatusRequestTimeout {
			t.Errorf("a body at a byte a second: status %d; want 408", st)
		}
		if answered != bodyTimeout {
			t.Errorf("the slow body was cut after %v; want the %v body timeout", answered, bodyTimeout)
		}
		<-sending // its next byte finds the connection closed
	})

	synctest.Test(t, func(t *testing.T) {
		// The body never comes: a server that drained it would wait for
		// the whole body timeout before ending the connection.
		conn := pipeBodyServer(t, httpadmit.WithBodyTimeout(time.Hour))
		start := time.Now()
		go fmt.Fprintf(conn, head, "sk-unknown")
		st, answered := answerThenEOF(t, conn, start)
		if st != http.StatusUnauthorized {
			t.Errorf("an unknown key with its body pending: status %d; want 401", st)
		}
		if answered != 0 {
			t.Errorf("the unknown key was refused after %v; want before any timer fired", answered)
		}
		if ended := time.Since(start); ended >= time.Hour {
			t.Errorf("the unknown key's connection ended after %v; want before the body timeout (drained, not closed)", ended)
		} else {
			t.Logf("the unknown key's connection ended %v after its request", ended)
		}
	})
}

func TestCredentialHeaders(t *testing.T) {
	ic := httpadmit.IdentityConfig{KeyHeaders: []string{"x-proxy-key"}}
	h := http.Header{}
	for _, k := range []string{"Authorization", "X-Proxy-Key", "X-Api-Key", "Api-Key", "Proxy-Authorization", "Cookie", "X-Auth-Token", "Content-Type", "User-Agent"} {
		h.Set(k, "v")
	}
	ic.StripCredentials(h)
	if len(h) != 2 || h.Get("Content-Type") == "" || h.Get("User-Agent") == "" {
		t.Errorf("StripCredentials left %v; want Content-Type and User-Agent only", h)
	}
	if !ic.CredentialHeader("x-proxy-key") || ic.CredentialHeader("X-Request-Id") {
		t.Error("CredentialHeader: the configured key header is a credential, X-Request-Id is not")
	}
}

// A body read to its declared length, without the read that returns
// io.EOF, is complete: the answer keeps the connection.
func TestBodyReadToItsLength(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bodywatch.WatchBody(w, r, time.Minute)
		buf := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			t.Errorf("ReadFull: %v", err)
		}
		bodywatch.CloseUnread(w.Header(), r, b)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Close || resp.Header.Get("Connection") == "close" {
		t.Error("the answer to a body read to its length closes the connection")
	}
}
