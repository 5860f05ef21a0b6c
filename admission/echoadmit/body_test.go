package echoadmit_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/admission/echoadmit"
	"github.com/sluicehq/sluice/admission/httpadmit"
	"github.com/sluicehq/sluice/internal/pipenet"
)

// A request with an unknown key is answered before its body arrives, and
// its connection closed rather than drained at the client's pace. The
// server runs in a testing/synctest bubble on in-memory connections: the
// answer comes before any timer fires, and the connection ends before the
// body timeout, the time a drained body that never comes would take.
func TestUnknownKeyWithPendingBody(t *testing.T) {
	const bodyTimeout = time.Hour
	synctest.Test(t, func(t *testing.T) {
		e, env := newEcho(t, echoadmit.Config{}, []httpadmit.Option{httpadmit.WithBodyTimeout(bodyTimeout)}, itemsPolicy)
		ln := pipenet.Listen()
		srv := &http.Server{Handler: e, ReadHeaderTimeout: bodyTimeout}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { close(env.release); srv.Close() })
		conn, err := ln.Dial()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()

		start := time.Now()
		go fmt.Fprint(conn, "GET /v1/items/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-unknown\r\nContent-Length: 1000\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		answered := time.Since(start)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d; want 401", resp.StatusCode)
		}
		if answered != 0 {
			t.Errorf("answered after %v; want before any timer fired", answered)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("the connection did not end: %v", err)
		}
		if ended := time.Since(start); ended >= bodyTimeout {
			t.Errorf("the connection ended after %v; want before the %v body timeout (closed, not drained)", ended, bodyTimeout)
		}
	})
}
