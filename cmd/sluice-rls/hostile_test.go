package main

import (
	be "encoding/binary"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serverSettings connects to the gRPC listener at addr as an HTTP/2
// client and returns the settings of the server's first SETTINGS frame.
func serverSettings(t *testing.T, addr string) map[uint16]uint32 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// The client preface and an empty SETTINGS frame.
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		t.Fatal(err)
	}
	for {
		var h [9]byte
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(conn, payload); err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		if h[3] != 0x4 || h[4]&0x1 != 0 { // not SETTINGS, or its ACK
			continue
		}
		out := map[uint16]uint32{}
		for i := 0; i+6 <= len(payload); i += 6 {
			out[be.BigEndian.Uint16(payload[i:])] = be.BigEndian.Uint32(payload[i+2:])
		}
		return out
	}
}

// TestConcurrentStreamsBounded: the gRPC listener advertises a bound on
// the streams a connection holds open at once (SETTINGS_MAX_CONCURRENT_STREAMS),
// -max-concurrent-streams, so that a client opening streams it never
// sends a request on cannot make the service hold a call for each
// without limit.
func TestConcurrentStreamsBounded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte(limit2), 0o644); err != nil {
		t.Fatal(err)
	}
	const maxConcurrentStreams = 0x3
	for _, tc := range []struct {
		args []string
		want uint32
	}{
		{nil, DefaultMaxConcurrentStreams},
		{[]string{"-max-concurrent-streams", "10"}, 10},
	} {
		conn, _, _ := binary(t, append([]string{"-config", file}, tc.args...)...)
		got, ok := serverSettings(t, conn.Target())[maxConcurrentStreams]
		if !ok || got != tc.want {
			t.Errorf("%v: SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v); want %d", tc.args, got, ok, tc.want)
		}
	}
}

// TestOperatorHeadersBounded: the operator listener, whose endpoints read
// a path and nothing else, refuses request headers past 16 KiB (431)
// rather than buffering net/http's default megabyte per connection.
func TestOperatorHeadersBounded(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api.yaml")
	if err := os.WriteFile(file, []byte(limit2), 0o644); err != nil {
		t.Fatal(err)
	}
	_, op, _ := binary(t, "-config", file)
	for _, tc := range []struct {
		size int
		want int
	}{
		{1 << 10, http.StatusOK},
		{64 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+op+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Padding", strings.Repeat("a", tc.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /healthz with a %d-byte header = %d; want %d", tc.size, resp.StatusCode, tc.want)
		}
	}
}
