package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The test binary is also the streams scenario's child processes.
func TestMain(m *testing.M) {
	if serveStreamsChild() {
		return
	}
	os.Exit(m.Run())
}

// A small streams scenario, each proxy in its own process: the gateway holds at most 64 KiB per open stream, and
// after the streams end every permit is back and the goroutines are back
// to their count before the streams. (The full 10,000 streams, and the
// CPU per chunk against the reverse proxy, are loadtest -streams.)
func TestStreamsBoundedAndReleased(t *testing.T) {
	s := streamsSetup{Streams: 200, Rate: 5, Hold: time.Second, Rounds: 1, Opening: 64, OpenWithin: 10 * time.Second}
	var out strings.Builder
	sum, err := runStreamRounds(s, &out)
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := sum.checkMemory(); err != nil {
		t.Error(err)
	}
	for _, r := range append(sum.RP, sum.Gateway...) {
		if r.Chunks == 0 || r.CPUPerChunk <= 0 {
			t.Errorf("%s measured %d chunks, %v ns of CPU per chunk", r.Proxy, r.Chunks, r.CPUPerChunk)
		}
	}
}
