package pipenet_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/internal/pipenet"
)

// TestServeOverPipes: an HTTP server answers on the listener's
// connections; a write its client does not read fails at its deadline, on
// the bubble's clock; after Close, Accept and Dial fail.
func TestServeOverPipes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := pipenet.Listen()
		wrote := make(chan error, 1)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stall" {
				_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Second))
				_, err := w.Write(make([]byte, 1<<20))
				wrote <- err
				return
			}
			io.WriteString(w, "hello")
		})}
		go srv.Serve(ln)
		get := func(path string) net.Conn {
			conn, err := ln.Dial()
			if err != nil {
				t.Fatal(err)
			}
			go io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			return conn
		}
		conn := get("/")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "hello" {
			t.Errorf("body %q; want hello", b)
		}
		conn.Close()

		stalled := get("/stall")
		start := time.Now()
		if err := <-wrote; !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) != time.Second {
			t.Errorf("a write nobody reads: %v after %v; want its deadline exceeded after 1s", err, time.Since(start))
		}
		stalled.Close()
		srv.Close()
		if _, err := ln.Dial(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Dial after Close = %v; want net.ErrClosed", err)
		}
	})
}
