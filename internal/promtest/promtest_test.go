package promtest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/promtest"
)

// TestStartScrapes starts a real prometheus against a loopback target,
// scraped as job sluice and as job other, and waits for the first scrape
// of both.
func TestStartScrapes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE promtest_up gauge\npromtest_up 1")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	p := promtest.Start(t, promtest.Config{Targets: []string{l.Addr().String()}, Jobs: map[string][]string{"other": {l.Addr().String()}}})
	// Prometheus scrapes on its own schedule: ask until both jobs are
	// up, with no deadline (the test timeout ends a scrape that never
	// comes; the last answer is logged every 10 queries).
	for i := 1; ; i++ {
		got, err := p.Query(context.Background(), "promtest_up")
		jobs := map[string]float64{}
		for _, s := range got {
			jobs[s.Metric["job"]] = s.Float()
		}
		if err == nil && len(got) == 2 && jobs["sluice"] == 1 && jobs["other"] == 1 {
			return
		}
		if i%10 == 0 {
			t.Logf("promtest_up not scraped yet: %v %v", got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
