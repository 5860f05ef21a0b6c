package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/config"
)

// TestBatchPollBackoff: a poll that fails waits twice as long as the one
// before, up to MaxPollInterval; one that succeeds goes back to
// PollInterval.
func TestBatchPollBackoff(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, `{"error":{"message":"down","type":"server_error"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"batch_1","object":"batch","status":"in_progress"}`))
	}))
	defer up.Close()
	clk := admissiontest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	ctl, err := admission.New(admission.Config{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(ctl, fuzzEstimator(t), &config.File{}, Config{
		Upstream: up.URL + "/v1", Batches: BatchAPI{PollInterval: time.Minute, MaxPollInterval: 10 * time.Minute},
	}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	b := g.batches
	if !b.reserveSlot("a") {
		t.Fatal("no open slot")
	}
	r := &batchRecord{tenant: "a", open: true}
	b.track("batch_1", r)
	poll := func() time.Duration {
		b.polls <- struct{}{}
		b.wg.Add(1)
		b.poll("batch_1", r)
		b.mu.Lock()
		defer b.mu.Unlock()
		return r.next.Sub(clk.Now())
	}
	for i, want := range []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		if got := poll(); got != want {
			t.Errorf("failed poll %d: next in %v; want %v", i+1, got, want)
		}
	}
	down.Store(false)
	if got := poll(); got != time.Minute {
		t.Errorf("poll after recovery: next in %v; want 1m", got)
	}
}
