// Package smuggle sends request-smuggling attempts over raw TCP to a test
// server: requests whose body a proxy in front could frame one way and
// the server another, each followed on the same connection by a second
// request that must never be served.
package smuggle

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An Attempt is the head of a request (its request line and header
// fields, without the blank line), with a body framed ambiguously.
type Attempt struct {
	Name string
	// Head is the request line and fields, each ending in CRLF; Body
	// the bytes after the blank line, before the smuggled request.
	Head, Body string
}

// Attempts returns the framing attacks on a request for method and path
// whose honest body is body, in its HTTP/1.1 and HTTP/1.0 forms; hdr
// holds further fields (Host, credentials), each ending in CRLF. tail is
// the smuggled request, which follows every attempt's body.
func Attempts(method, path, hdr, body, tail string) []Attempt {
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	line := method + " " + path + " HTTP/1.1\r\n" + hdr
	return []Attempt{
		// TE.CL: the server reads the chunks, a proxy honouring the
		// Content-Length would read the whole rest as the body.
		{"Content-Length and chunked", line + fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(chunked)+len(tail)), chunked},
		{"chunked and Content-Length", line + fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n", len(chunked)+len(tail)), chunked},
		// CL.TE: a proxy reading the Content-Length stops inside the chunks.
		{"short Content-Length and chunked", line + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", chunked},
		{"chunked twice", line + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked},
		{"gzip, chunked", line + "Transfer-Encoding: gzip, chunked\r\n", chunked},
		{"chunked, identity", line + "Transfer-Encoding: chunked, identity\r\n", chunked},
		{"identity", line + fmt.Sprintf("Transfer-Encoding: identity\r\nContent-Length: %d\r\n", len(body)), body},
		{"obfuscated chunked", line + fmt.Sprintf("Transfer-Encoding: xchunked\r\nContent-Length: %d\r\n", len(body)), body},
		// HTTP/1.0: net/http drops the Transfer-Encoding and frames by
		// the Content-Length; a proxy may not.
		{"HTTP/1.0 keep-alive with chunked and Content-Length", method + " " + path + " HTTP/1.0\r\n" + hdr +
			fmt.Sprintf("Connection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n", len(body)), body},
	}
}

// Result is what a server answered to an attempt.
type Result struct {
	// Statuses are the status codes of the answers read, in order.
	Statuses []int
	// Closed is set when the server closed the connection after them.
	Closed bool
	// Err is the read error other than the close, if any.
	Err error
}

// Send writes a's head, a blank line, a's body and tail on a new
// connection to addr (host:port), and reads answers until the server
// closes the connection or wait passes without one (a guard against a
// server that keeps it open, not a measure).
func Send(t testing.TB, addr string, a Attempt, tail string, wait time.Duration) Result {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := io.WriteString(conn, a.Head+"\r\n"+a.Body+tail); err != nil {
		t.Fatalf("%s: %v", a.Name, err)
	}
	var res Result
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), "connection reset"):
				res.Closed = true
			case errors.As(err, &ne) && ne.Timeout():
			default:
				res.Err = err
			}
			return res
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		res.Statuses = append(res.Statuses, resp.StatusCode)
	}
}

// Check fails t unless the server answered the attempt at most once
// (the smuggled request got no answer) and then closed the connection.
func (r Result) Check(t testing.TB, what string) {
	t.Helper()
	if len(r.Statuses) > 1 || !r.Closed || r.Err != nil {
		t.Errorf("%s: answers %v, connection closed %v (%v); want at most one answer, then the connection closed", what, r.Statuses, r.Closed, r.Err)
	}
}
