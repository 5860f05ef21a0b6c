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
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/bodywatch"
)

// bodyServer serves a handler behind the middleware whose WithRequest
// function reads the body (as a cost estimator does) and prices the
// request at the number in its "cost" header.
func bodyServer(t *testing.T, opts ...httpadmit.Option) *httptest.Server {
	t.Helper()
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1 << 40, Per: time.Minute},
	}})
	if err != nil {
		t.Fatal(err)
	}
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
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })))
	t.Cleanup(srv.Close)
	return srv
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

// dialRaw opens a connection to srv.
func dialRaw(t *testing.T, srv *httptest.Server) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// answerThenEOF reads one answer from conn and checks the connection then
// ends, all within d; it returns the status.
func answerThenEOF(t *testing.T, conn net.Conn, d time.Duration) int {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", d, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after %s the connection did not end within %v: %v", resp.Status, d, err)
	}
	return resp.StatusCode
}

// A body sent a byte a second is cut at the body timeout with 408; a
// request with an unknown key is refused before its body arrives and its
// connection closed rather than drained.
func TestSlowAndUnwantedBodies(t *testing.T) {
	srv := bodyServer(t, httpadmit.WithBodyTimeout(200*time.Millisecond))
	head := "POST /v1/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nCost: 1\r\nContent-Length: 100\r\n\r\n"

	conn := dialRaw(t, srv)
	fmt.Fprintf(conn, head+"{", keySteady)
	go func(conn net.Conn) {
		for range 5 {
			time.Sleep(time.Second)
			if _, err := io.WriteString(conn, " "); err != nil {
				return
			}
		}
	}(conn)
	start := time.Now()
	if st := answerThenEOF(t, conn, 3*time.Second); st != http.StatusRequestTimeout {
		t.Errorf("a body at a byte a second: status %d; want 408", st)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the slow body was cut after %v; want about the 200ms body timeout", d)
	}

	slowTimeout := bodyServer(t, httpadmit.WithBodyTimeout(time.Minute))
	conn = dialRaw(t, slowTimeout)
	fmt.Fprintf(conn, head, "sk-unknown")
	start = time.Now()
	if st := answerThenEOF(t, conn, 3*time.Second); st != http.StatusUnauthorized {
		t.Errorf("an unknown key with its body pending: status %d; want 401", st)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the unknown key's connection ended after %v; want at once", d)
	}
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
