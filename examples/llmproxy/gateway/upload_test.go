package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
)

// slowUpload starts a batch file upload of tenant key on a raw
// connection, declaring a 1 MiB body and sending only the start of its
// file, and returns the connection for the test to trickle more or read
// the answer.
func slowUpload(t *testing.T, s *batchStack, key string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	start := "--b0undary\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n" +
		"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n" +
		chatLine("r1", "hi", 5)[:10]
	fmt.Fprintf(conn, "POST /v1/files HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: %d\r\n\r\n%s", key, 1<<20, start)
	return conn
}

// answerOn reads the status of the answer on conn. It sets no deadline:
// an answer that never comes is ended by the connection's close when the
// test ends, or by go test's -timeout.
func answerOn(t *testing.T, conn net.Conn) (int, error) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A tenant's uploads, however slow, hold only its own upload slot: with
// two crawling uploads of tenant a, one of them is refused with 429
// (its own limit) and tenant b's upload is served, never a 503 because a
// holds the gateway's slots.
func TestSlowUploadsHoldOnlyTheirTenantsSlot(t *testing.T) {
	// A long grace: the crawling upload keeps its slot for the test.
	s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, _ *upstream.Config) { gc.Batches.UploadGrace = time.Minute })
	a1, a2 := slowUpload(t, s, keyA), slowUpload(t, s, keyA)
	statuses := make(chan int, 2)
	for _, c := range []net.Conn{a1, a2} {
		go func() {
			st, _ := answerOn(t, c)
			statuses <- st
		}()
	}
	if st := <-statuses; st != http.StatusTooManyRequests {
		t.Fatalf("two crawling uploads of one tenant: the first answer is %d; want 429 for the second (one slot a tenant)", st)
	}
	resp, body := s.upload(t, batchKeyB, batchFile)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("tenant b's upload while tenant a's crawl: status %d: %s; want 200", resp.StatusCode, body)
	}
}

// An upload slower than the minimum rate is cut once a span of the grace
// brings too little (408, the connection closed), and its slot is free
// again for the tenant's next upload.
func TestUploadBelowMinimumRateIsCut(t *testing.T) {
	s := batchGateway(t, batchPolicy, func(gc *gatewaySetup, _ *upstream.Config) {
		gc.Batches.MinUploadRate, gc.Batches.UploadGrace = 64<<10, 200*time.Millisecond
	})
	conn := slowUpload(t, s, keyA)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a byte every 20 ms: 50 B/s, far below 64 KiB/s
		for tick := time.NewTicker(20 * time.Millisecond); ; {
			select {
			case <-stop:
				tick.Stop()
				return
			case <-tick.C:
				if _, err := io.WriteString(conn, "x"); err != nil {
					return
				}
			}
		}
	}()
	if st, err := answerOn(t, conn); st != http.StatusRequestTimeout {
		t.Fatalf("an upload at 50 B/s with a minimum of 64 KiB/s: answer %d (%v); want 408", st, err)
	}
	again := slowUpload(t, s, keyA)
	if st, err := answerOn(t, again); st != http.StatusRequestTimeout {
		t.Errorf("the tenant's next upload: answer %d (%v); want 408 once it stalls, not 429: the cut one freed its slot", st, err)
	}
}
