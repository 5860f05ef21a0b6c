package replay_test

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

const exampleLog = "../../examples/replay/sample.jsonl"

func openExample() (io.ReadCloser, error) { return os.Open(exampleLog) }

func loadExample(t *testing.T, path string) replay.Candidate {
	t.Helper()
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return replay.Candidate{Name: path, Config: f.Config}
}

// rejectedAlone replays the example log through policy p alone, enforced,
// with limit l and burst b, without the tenants in skip.
func rejectedAlone(t *testing.T, p admission.Policy, l, b int64, skip []string) (rejected, matched int64) {
	t.Helper()
	p.Mode, p.Limit, p.Burst = limits.Enforce, l, b
	f, err := os.Open(exampleLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rp, err := replay.NewReplayer(replay.Config{}, replay.Candidate{Config: admission.Config{Policies: []admission.Policy{p}}})
	if err != nil {
		t.Fatal(err)
	}
	lr := requestlog.NewReader(f)
	var rec requestlog.Record
	for lr.Read(&rec) == nil {
		if len(skip) > 0 && rec.Tenant == skip[0] {
			continue
		}
		rp.Add(&rec)
	}
	rp.Finish()
	pr := rp.Report().Candidates[0].Policies[0]
	return pr.Rejected, pr.Requests
}

// Each suggestion, replayed, meets the target; one less does not.
func TestSuggestSmallestLimit(t *testing.T) {
	cand := loadExample(t, "../../examples/replay/candidate.yaml")
	for _, tc := range []struct {
		target    float64
		ignoreTop int
	}{{0.01, 0}, {0.05, 0}, {0.01, 1}} {
		got, err := replay.Suggest(context.Background(), openExample, cand, replay.SuggestConfig{Target: tc.target, IgnoreTop: tc.ignoreTop})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(cand.Config.Policies) {
			t.Fatalf("%d suggestions for %d policies", len(got), len(cand.Config.Policies))
		}
		for i, s := range got {
			p := cand.Config.Policies[i]
			if !s.Reached || s.Policy != p.Name || s.Limit <= 0 {
				t.Fatalf("target %g: %+v", tc.target, s)
			}
			if tc.ignoreTop == 1 && (len(s.Ignored) != 1 || s.Ignored[0] != "noisy") {
				t.Errorf("ignored %v, want the busiest tenant, noisy", s.Ignored)
			}
			rej, n := rejectedAlone(t, p, s.Limit, s.Burst, s.Ignored)
			if rej != s.Rejected || n != s.Matched || float64(rej) > tc.target*float64(n) {
				t.Errorf("target %g %s: limit %d burst %d rejects %d of %d (suggestion says %d of %d)", tc.target, p.Name, s.Limit, s.Burst, rej, n, s.Rejected, s.Matched)
			}
			if s.Limit > 1 {
				less := s.Limit - 1
				burst := s.Burst
				if p.Burst > 0 {
					burst = max(1, (p.Burst*less+p.Limit-1)/p.Limit)
				}
				if rej, n := rejectedAlone(t, p, less, burst, s.Ignored); float64(rej) <= tc.target*float64(n) {
					t.Errorf("target %g %s: one less (%d, burst %d) rejects %d of %d, also within the target", tc.target, p.Name, less, burst, rej, n)
				}
			}
		}
	}
}

func TestSuggestErrors(t *testing.T) {
	cand := loadExample(t, "../../examples/replay/current.yaml")
	for _, cfg := range []replay.SuggestConfig{{Target: 1}, {Target: -0.1}, {IgnoreTop: -1}} {
		if _, err := replay.Suggest(context.Background(), openExample, cand, cfg); err == nil {
			t.Errorf("Suggest(%+v) = nil error", cfg)
		}
	}
}
