package echoadmit_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/echoadmit"
)

// A request with an unknown key is answered before its body arrives, and
// its connection closed rather than drained at the client's pace.
func TestUnknownKeyWithPendingBody(t *testing.T) {
	srv := newServer(t, echoadmit.Config{}, itemsPolicy)
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/items/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-unknown\r\nContent-Length: 1000\r\n\r\n")
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(3 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d; want 401", resp.StatusCode)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection did not end: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("answered and closed after %v; want at once", d)
	}
}
