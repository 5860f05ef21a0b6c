package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/internal/chart"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// DefaultSuggestTarget is SuggestConfig.Target's default: at most 1% of a
// policy's requests rejected.
const DefaultSuggestTarget = 0.01

// suggestProbes is how many limits one pass over the log tries per
// policy.
const suggestProbes = 15

// SuggestConfig configures Suggest.
type SuggestConfig struct {
	// Target is the largest share of a policy's requests it may reject;
	// zero means DefaultSuggestTarget.
	Target float64
	// IgnoreTop leaves the IgnoreTop tenants with the most requests in
	// the log out of the replays, as if they had limits of their own (a
	// plan): the suggestion fits everyone else.
	IgnoreTop int
	// Replay configures the replays (MaxTenants, Reorder,
	// OnRecordError).
	Replay Config
}

// A Suggestion is the smallest limit of one policy of a candidate under
// which the policy, enforced alone on the log, rejects at most the
// target share of the requests it matches.
type Suggestion struct {
	Candidate string
	Policy    string
	// Unit is the unit the limit counts.
	Unit limits.Unit
	// Limit is the suggested limit; Burst the suggested burst (the
	// policy's burst scaled with its limit; zero when it has none).
	Limit, Burst int64
	// WasLimit and WasBurst are the policy's own.
	WasLimit, WasBurst int64
	// Matched and Rejected are the policy's figures under the
	// suggestion, Share their ratio; WasRejected what it rejects with its
	// own limit, alone and enforced.
	Matched, Rejected, WasRejected int64
	Share                          float64
	// Target is the share aimed at, Ignored the tenants left out (each
	// under the name the report counts it by: a hostile name hashed).
	Target  float64
	Ignored []string
	// Reached is false when even the largest limit (limits.MaxAmount)
	// rejects more than the target (a request costing more than any
	// limit, say).
	Reached bool
}

// Suggest finds, for each policy of cand, the smallest limit (and burst,
// scaled with it) under which the policy, enforced alone (its queue
// simulated), rejects at most cfg.Target of the requests it matches on
// the log. It reads the log (open returns it from the start each time) a
// few times: once to count tenants and the policies' own figures, then
// once per round, each round trying several limits per policy at once
// and narrowing the range around the smallest limit meeting the target,
// until the answer L meets it and L-1 does not. Rejections fall as a
// limit grows, but not strictly for weighted windows (admitting one more
// request can push a later one out), so a limit below L may meet the
// target again; L is the smallest the search met, with L-1 failing.
func Suggest(ctx context.Context, open func() (io.ReadCloser, error), cand Candidate, cfg SuggestConfig) ([]Suggestion, error) {
	if cfg.Target == 0 {
		cfg.Target = DefaultSuggestTarget
	}
	if cfg.Target < 0 || cfg.Target >= 1 || cfg.IgnoreTop < 0 {
		return nil, fmt.Errorf("shadow: suggest: target must be in (0, 1) and ignore-top >= 0, got %g and %d", cfg.Target, cfg.IgnoreTop)
	}
	policies := cand.Config.Policies
	if len(policies) == 0 {
		return nil, errors.New("shadow: suggest: the candidate has no policy")
	}
	// The policies' own limits, alone and enforced, and the tenants'
	// requests.
	own := make([]Candidate, len(policies))
	for i, p := range policies {
		own[i] = alone(cand, p, p.Limit, p.Burst)
	}
	rp, err := replayFiltered(ctx, open, cfg.Replay, nil, own)
	if err != nil {
		return nil, err
	}
	ignored := topTenants(rp, cfg.IgnoreTop)
	skip := map[string]bool{}
	for _, t := range ignored {
		skip[t] = true
	}
	if len(skip) > 0 {
		if rp, err = replayFiltered(ctx, open, cfg.Replay, skip, own); err != nil {
			return nil, err
		}
	}
	base := rp.Report()
	out := make([]Suggestion, len(policies))
	type search struct{ lo, hi int64 } // lo fails (or is 0), hi meets
	ranges := make([]search, len(policies))
	meets := func(pr *Policy) bool { return pr.Rejected <= int64(cfg.Target*float64(pr.Requests)) }
	for i, p := range policies {
		pr := &base.Candidates[i].Policies[0]
		out[i] = Suggestion{
			Candidate: cand.Name, Policy: p.Name, Unit: pr.Unit, WasLimit: p.Limit, WasBurst: p.Burst,
			WasRejected: pr.Rejected, Target: cfg.Target, Ignored: ignored,
		}
		ranges[i] = search{lo: 0, hi: -1}
		if meets(pr) {
			ranges[i].hi = p.Limit
			out[i].Limit, out[i].Burst, out[i].Matched, out[i].Rejected = p.Limit, p.Burst, pr.Requests, pr.Rejected
		} else {
			ranges[i].lo = p.Limit
		}
	}
	for {
		var probes []Candidate
		var owner []int
		var limitsTried []int64
		for i, p := range policies {
			r := ranges[i]
			for _, l := range probeLimits(r.lo, r.hi) {
				probes = append(probes, alone(cand, p, l, scaledBurst(p, l)))
				owner = append(owner, i)
				limitsTried = append(limitsTried, l)
			}
		}
		if len(probes) == 0 {
			break
		}
		rp, err := replayFiltered(ctx, open, cfg.Replay, skip, probes)
		if err != nil {
			return nil, err
		}
		rep := rp.Report()
		// First the smallest limit meeting the target, then the largest
		// failing below it: the range narrows around the smallest.
		for k := range probes {
			i, l, pr := owner[k], limitsTried[k], &rep.Candidates[k].Policies[0]
			if r := &ranges[i]; meets(pr) && (r.hi < 0 || l < r.hi) {
				r.hi = l
				out[i].Limit, out[i].Burst, out[i].Matched, out[i].Rejected = l, scaledBurst(policies[i], l), pr.Requests, pr.Rejected
			}
		}
		for k := range probes {
			i, l, pr := owner[k], limitsTried[k], &rep.Candidates[k].Policies[0]
			if r := &ranges[i]; !meets(pr) && l > r.lo && (r.hi < 0 || l < r.hi) {
				r.lo = l
			}
		}
		for i := range ranges {
			if r := &ranges[i]; r.hi < 0 && r.lo >= limits.MaxAmount {
				r.hi = 0 // unreachable: stop searching
			}
		}
	}
	for i := range out {
		out[i].Reached = ranges[i].hi > 0
		out[i].Share = shadow.Ratio(out[i].Rejected, out[i].Matched)
	}
	return out, nil
}

// probeLimits returns the limits to try between lo (failing) and hi
// (meeting the target, or -1 when none is known yet), or none when hi is
// the answer.
func probeLimits(lo, hi int64) []int64 {
	if hi == 0 || (hi > 0 && hi-lo <= 1) {
		return nil
	}
	var out []int64
	if hi < 0 {
		// No limit meets the target yet: grow geometrically.
		l := max(lo, 1)
		for range suggestProbes {
			l = min(l*4, limits.MaxAmount)
			out = append(out, l)
			if l == limits.MaxAmount {
				break
			}
		}
		return out
	}
	step := (hi - lo) / (suggestProbes + 1)
	if step < 1 {
		step = 1
	}
	for l := lo + step; l < hi && len(out) < suggestProbes; l += step {
		out = append(out, l)
	}
	return out
}

// scaledBurst returns p's burst for limit l, in proportion to its own.
func scaledBurst(p admission.Policy, l int64) int64 {
	if p.Burst == 0 || p.Limit == 0 {
		return p.Burst
	}
	return max(1, (p.Burst*l+p.Limit-1)/p.Limit)
}

// alone returns a candidate of policy p alone, enforced, with limit l and
// burst b, and cand's plans.
func alone(cand Candidate, p admission.Policy, l, b int64) Candidate {
	p.Mode, p.Limit, p.Burst = limits.Enforce, l, b
	return Candidate{Name: fmt.Sprintf("%s/%s@%d", cand.Name, p.Name, l), Config: admission.Config{Policies: []admission.Policy{p}, Plans: cand.Config.Plans}}
}

// replayFiltered replays the log through cands, leaving out the records
// of the tenants in skip, and finishes the replay.
func replayFiltered(ctx context.Context, open func() (io.ReadCloser, error), cfg Config, skip map[string]bool, cands []Candidate) (*Replayer, error) {
	rp, err := NewReplayer(cfg, cands...)
	if err != nil {
		return nil, err
	}
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if err := addFiltered(ctx, rp, rc, skip); err != nil {
		rp.abandon()
		return nil, err
	}
	rp.Finish()
	return rp, nil
}

// addFiltered adds the records of the log r to rp but those of the
// tenants in skip.
func addFiltered(ctx context.Context, rp *Replayer, r io.Reader, skip map[string]bool) error {
	lr := requestlog.NewReader(r)
	var rec requestlog.Record
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		err := lr.Read(&rec)
		if errors.Is(err, io.EOF) {
			return nil
		}
		var re *requestlog.RecordError
		if errors.As(err, &re) {
			if err := rp.recordError(re); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if len(skip) > 0 && skip[safeTenant(rec.Tenant)] {
			continue
		}
		if err := rp.checkSample(&rec); err != nil {
			return err
		}
		rp.Add(&rec)
	}
}

// topTenants returns the n tenants with the most records replayed, most
// first (ties by name).
func topTenants(rp *Replayer, n int) []string {
	if n == 0 {
		return nil
	}
	var names []string
	for t := range rp.tenants.m {
		if t != shadow.OtherTenant {
			names = append(names, t)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(*rp.tenants.m[b], *rp.tenants.m[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return names[:min(n, len(names))]
}

// YAML returns the suggestion as the lines of a policy file to paste
// over the policy's own: its name, limit and burst, each commented with
// what it was.
func (s *Suggestion) YAML() string {
	if !s.Reached {
		return fmt.Sprintf("# %s: no limit keeps its rejected share at or under %s\n", s.Policy, chart.Pct(s.Target))
	}
	out := fmt.Sprintf("  - name: %s\n    limit: %d  # was %d; rejects %s (%d of %d)\n", s.Policy, s.Limit, s.WasLimit, chart.Pct(s.Share), s.Rejected, s.Matched)
	if s.Burst > 0 {
		out += fmt.Sprintf("    burst: %d  # was %d\n", s.Burst, s.WasBurst)
	}
	return out
}
