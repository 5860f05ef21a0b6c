package replay_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// A replay of a log gives each policy the figures the live report
// (shadow.Recorder) measured on the same traffic, in the same type, field
// by field: requests, rejected, would reject, refused, ratio and tenants.
func TestReplayFiguresEqualLiveReport(t *testing.T) {
	var specs []string
	for i := range 40 {
		tenant := "quiet"
		if i%4 != 0 {
			tenant = "noisy"
		}
		specs = append(specs, fmt.Sprintf("%.1f %s", float64(i)/10, tenant))
		if i == 20 {
			for range 5 {
				specs = append(specs, fmt.Sprintf("%.1f other", float64(i)/10))
			}
		}
	}
	log := logLines(t, specs...)
	for _, mode := range []limits.Mode{limits.Enforce, limits.Shadow} {
		t.Run(mode.String(), func(t *testing.T) {
			p := admission.Policy{Name: "rps", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 3, Per: time.Second, Burst: 3, Mode: mode}
			cfg := admission.Config{Policies: []admission.Policy{p}}

			clk := vclock.New(shadowtest.T0)
			rec, err := shadow.NewRecorder(shadow.RecorderConfig{}, shadow.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			ctl, err := admission.New(cfg, admission.WithClock(clk), admission.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			ctl.SetAllShadow(false)
			lr := requestlog.NewReader(strings.NewReader(log))
			var r requestlog.Record
			for lr.Read(&r) == nil {
				clk.Set(r.Time)
				if tk, err := ctl.TryAdmit(context.Background(), r.Request); err == nil {
					tk.Settle(admission.Usage{})
				}
			}
			live := rec.Report(0).Policies
			if len(live) != 1 {
				t.Fatalf("live report: %d policies; want 1", len(live))
			}

			rep := replayLog(t, log, replay.Candidate{Name: "c", Config: cfg})
			got := rep.Candidates[0].Policies[0].Figures
			want := live[0]
			want.Buckets, want.Limit = nil, p.Limit // the replay charts its own series; the live report does not know limits
			if !reflect.DeepEqual(got, want) {
				t.Errorf("replay figures:\n%+v\nlive report:\n%+v", got, want)
			}
			if want.Refused == 0 || len(want.Tenants) < 2 || want.Refused != want.Rejected+want.WouldReject {
				t.Errorf("live report %+v: want refusals from at least two tenants", want)
			}
			if (mode == limits.Shadow) != (want.WouldReject > 0 && want.Rejected == 0) {
				t.Errorf("%s policy: rejected %d, would reject %d", mode, want.Rejected, want.WouldReject)
			}
		})
	}
}
