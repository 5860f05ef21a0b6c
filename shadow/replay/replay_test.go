package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
	"github.com/sluicehq/sluice/shadow/replay"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// logLines writes records as "seconds-after-t0 tenant [key=value...]"
// specs, e.g. "0.5 acme tokens=800 actual=200 dur=1s".
func logLines(t testing.TB, specs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, s := range specs {
		f := strings.Fields(s)
		var secs float64
		fmt.Sscan(f[0], &secs)
		r := requestlog.Record{Time: shadowtest.T0.Add(time.Duration(secs * float64(time.Second))), Request: admission.Request{Tenant: f[1]}}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			var n int64
			fmt.Sscan(v, &n)
			switch k {
			case "tokens":
				r.Tokens = n
			case "cost":
				r.Cost = n
			case "actual":
				r.Actual = admission.Usage{Tokens: n, TokensKnown: true}
			case "dur":
				r.Duration, _ = time.ParseDuration(v)
			case "op":
				r.Operation = v
			case "begin":
				r.BeginOnly = v == "1"
			case "session":
				r.Session = v
			case "step":
				r.Fingerprint = limits.Fingerprint{byte(n)}
			case "steps":
				r.Units = append(r.Units, admission.UnitAmount{Unit: limits.UnitSteps, Amount: n})
			default:
				t.Fatalf("bad spec %q", s)
			}
		}
		b.Write(r.AppendJSON(nil))
		b.WriteByte('\n')
	}
	return b.String()
}

func rpm(mode limits.Mode) admission.Policy {
	return admission.Policy{Name: "rpm", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 2, Per: time.Second, Mode: mode}
}

func replayLog(t testing.TB, log string, cands ...replay.Candidate) replay.Report {
	t.Helper()
	rep, err := replay.Run(context.Background(), strings.NewReader(log), replay.Config{}, cands...)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func cand(name string, ps ...admission.Policy) replay.Candidate {
	return replay.Candidate{Name: name, Config: admission.Config{Policies: ps}}
}

// A known log through known policies gives exact counts.
func TestReplayCounts(t *testing.T) {
	type counts struct{ matched, admitted, rejected, would, bypassed, peak, refusedTokens int64 }
	tests := []struct {
		name   string
		policy admission.Policy
		log    []string
		// the candidate's admitted, rejected, would-rejected and peak in flight
		admitted, rejected, would, peak int64
		want                            counts
		top                             string
	}{
		{
			name:     "token bucket refills 2/s",
			policy:   rpm(limits.Enforce),
			log:      []string{"0 acme", "0 acme", "0 acme tokens=10", "0.5 acme", "0.5 acme tokens=5", "0.5 beta"},
			admitted: 4, rejected: 2, peak: 1,
			want: counts{matched: 6, admitted: 4, rejected: 2, peak: 1, refusedTokens: 15},
			top:  "acme:2/5",
		},
		{
			name:     "the same in shadow",
			policy:   rpm(limits.Shadow),
			log:      []string{"0 acme", "0 acme", "0 acme tokens=10", "0.5 acme", "0.5 acme tokens=5", "0.5 beta"},
			admitted: 6, would: 2, peak: 1,
			want: counts{matched: 6, admitted: 4, would: 2, peak: 1, refusedTokens: 15},
			top:  "acme:2/5",
		},
		{
			name:     "concurrency: permits held for the duration, freed at its end",
			policy:   admission.Policy{Name: "conc", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 1},
			log:      []string{"0 acme dur=1s", "0 acme", "0.5 beta dur=1s", "1 acme", "1.2 beta", "1.5 beta"},
			admitted: 4, rejected: 2, peak: 2,
			want: counts{matched: 6, admitted: 4, rejected: 2, peak: 2},
			top:  "acme:1/3 beta:1/3",
		},
		{
			name:     "tokens reconciled with the actual usage",
			policy:   admission.Policy{Name: "tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute},
			log:      []string{"0 acme tokens=800 actual=200", "0 acme tokens=700", "0 acme tokens=200", "0 beta tokens=1000"},
			admitted: 3, rejected: 1, peak: 1,
			want: counts{matched: 4, admitted: 3, rejected: 1, peak: 1, refusedTokens: 200},
			top:  "acme:1/3",
		},
		{
			name:     "settled late: actual usage charged at the end of the duration",
			policy:   admission.Policy{Name: "tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.FixedWindow, Limit: 1000, Per: time.Minute},
			log:      []string{"0 acme tokens=100 actual=900 dur=2s", "1 acme tokens=800", "3 acme tokens=100", "3 acme tokens=1"},
			admitted: 2, rejected: 2, peak: 2,
			want: counts{matched: 4, admitted: 2, rejected: 2, peak: 2, refusedTokens: 101},
			top:  "acme:2/4",
		},
		{
			name:     "operations not matched are not counted",
			policy:   admission.Policy{Name: "chat", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute, Match: limits.Match{Operations: []string{"chat"}}},
			log:      []string{"0 acme op=chat", "0 acme op=embed", "1 acme op=chat", "2 acme op=embed"},
			admitted: 3, rejected: 1, peak: 1,
			want: counts{matched: 2, admitted: 1, rejected: 1, peak: 1},
			top:  "acme:1/4",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := replayLog(t, logLines(t, tt.log...), cand("c", tt.policy))
			c := rep.Candidates[0]
			if c.Admitted != tt.admitted || c.Rejected != tt.rejected || c.WouldRejected != tt.would || c.PeakInFlight != tt.peak {
				t.Errorf("candidate admitted, rejected, would, peak = %d, %d, %d, %d; want %d, %d, %d, %d",
					c.Admitted, c.Rejected, c.WouldRejected, c.PeakInFlight, tt.admitted, tt.rejected, tt.would, tt.peak)
			}
			p := c.Policies[0]
			got := counts{p.Requests, p.Admitted, p.Rejected, p.WouldReject, p.Bypassed, p.PeakInFlight, p.RefusedCost.Tokens}
			if got != tt.want {
				t.Errorf("policy counts = %+v; want %+v", got, tt.want)
			}
			var top []string
			for _, tr := range p.Tenants {
				top = append(top, fmt.Sprintf("%s:%d/%d", tr.Tenant, tr.Rejected+tr.WouldReject, tr.Requests))
			}
			if s := strings.Join(top, " "); s != tt.top {
				t.Errorf("top tenants = %q; want %q", s, tt.top)
			}
		})
	}
}

// A rejected request takes nothing from the candidate's other policies:
// policies after the rejecting one are bypassed, and ones before give
// their permits back.
func TestReplayBypassed(t *testing.T) {
	quota := admission.Policy{Name: "daily", Key: shadowtest.TenantKey(), Algorithm: limits.Quota, Period: limits.PeriodDay, Limit: 100}
	rep := replayLog(t, logLines(t, "0 acme", "0 acme", "0 acme", "0.1 acme"), cand("c", rpm(limits.Enforce), quota))
	for _, p := range rep.Candidates[0].Policies {
		var want [4]int64 // matched, admitted, rejected, bypassed
		switch p.Policy {
		case "rpm":
			want = [4]int64{4, 2, 2, 0}
		case "daily":
			want = [4]int64{4, 2, 0, 2}
		}
		if got := [4]int64{p.Requests, p.Admitted, p.Rejected, p.Bypassed}; got != want {
			t.Errorf("%s: matched, admitted, rejected, bypassed = %v; want %v", p.Policy, got, want)
		}
	}
}

// randomLog is multi-tenant traffic: a few heavy tenants, many light ones,
// durations and reconciled token usage.
func randomLog(t testing.TB, seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 0))
	var b bytes.Buffer
	at := shadowtest.T0
	for i := range n {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)))
		tenant := fmt.Sprintf("t%02d", min(rng.IntN(40), rng.IntN(40)))
		if i%7 == 0 {
			tenant = "noisy"
		}
		est := int64(100 + rng.IntN(2000))
		actual := est * int64(20+rng.IntN(100)) / 100
		r := requestlog.Record{
			Time: at, Request: admission.Request{Tenant: tenant, Operation: "POST /v1/chat/completions", Model: "m", Tokens: est, Cost: est / 10},
			Actual: admission.Usage{Tokens: actual, TokensKnown: true}, Duration: time.Duration(rng.IntN(3000)) * time.Millisecond,
		}
		b.Write(r.AppendJSON(nil))
		b.WriteByte('\n')
	}
	return b.String()
}

// The core guarantee: a shadow policy would reject exactly what its
// enforcing twin rejects, tenant by tenant, for every algorithm.
func TestReplayShadowEqualsEnforce(t *testing.T) {
	log := randomLog(t, 7, 4000)
	policies := []admission.Policy{
		{Name: "token_bucket", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 5, Burst: 3, Per: time.Second},
		{Name: "fixed_window", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 4, Per: time.Second},
		{Name: "sliding_window", Key: shadowtest.TenantKey(), Algorithm: limits.SlidingWindow, Limit: 4, Per: time.Second},
		{Name: "sliding_log", Key: shadowtest.TenantKey(), Algorithm: limits.SlidingLog, Limit: 4, Per: time.Second},
		{Name: "tokens", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 4000, Per: time.Second},
		{Name: "concurrency", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 3},
		{Name: "global_concurrency", Algorithm: limits.Concurrency, Limit: 40},
		{Name: "quota", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.Quota, Limit: 200_000, Per: time.Hour},
	}
	var cands []replay.Candidate
	for _, p := range policies {
		e, s := p, p
		e.Mode, s.Mode = limits.Enforce, limits.Shadow
		cands = append(cands, cand(p.Name+"/enforce", e), cand(p.Name+"/shadow", s))
	}
	rep := replayLog(t, log, cands...)
	for i := 0; i < len(rep.Candidates); i += 2 {
		e, s := rep.Candidates[i].Policies[0], rep.Candidates[i+1].Policies[0]
		if e.Rejected == 0 || e.Admitted == 0 {
			t.Errorf("%s: enforcing rejected %d, admitted %d; the test wants both", e.Policy, e.Rejected, e.Admitted)
		}
		if e.Rejected != s.WouldReject || e.Admitted != s.Admitted || s.Rejected != 0 || e.WouldReject != 0 {
			t.Errorf("%s: enforce rejected %d admitted %d; shadow would reject %d admitted %d",
				e.Policy, e.Rejected, e.Admitted, s.WouldReject, s.Admitted)
		}
		if !reflect.DeepEqual(e.RefusedCost, s.RefusedCost) || !reflect.DeepEqual(e.Reasons, s.Reasons) {
			t.Errorf("%s: refused cost %+v, reasons %v; shadow %+v, %v", e.Policy, e.RefusedCost, e.Reasons, s.RefusedCost, s.Reasons)
		}
		if len(e.Tenants) != len(s.Tenants) {
			t.Fatalf("%s: %d top tenants; shadow %d", e.Policy, len(e.Tenants), len(s.Tenants))
		}
		for j := range e.Tenants {
			a, b := e.Tenants[j], s.Tenants[j]
			if a.Tenant != b.Tenant || a.Rejected != b.WouldReject || a.Requests != b.Requests {
				t.Errorf("%s: top tenant %d = %+v; shadow %+v", e.Policy, j, a, b)
			}
		}
	}
}

// An enforcing queue waits what does not fit, where its shadow twin
// (which never waits, as in the gateway) reports would-reject: the
// queue rejects fewer, and only for a full queue or a timeout.
func TestReplayQueueWaits(t *testing.T) {
	log := randomLog(t, 7, 4000)
	p := admission.Policy{Name: "queued_concurrency", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 2, Queue: limits.Queue{Size: 4, Timeout: time.Second}}
	e, s := p, p
	e.Mode, s.Mode = limits.Enforce, limits.Shadow
	rep := replayLog(t, log, cand("enforce", e), cand("shadow", s))
	pe, ps := rep.Candidates[0].Policies[0], rep.Candidates[1].Policies[0]
	if pe.Rejected == 0 || pe.Rejected >= ps.WouldReject || pe.Admitted+pe.Rejected != pe.Requests {
		t.Errorf("enforcing queue rejected %d of %d (admitted %d); shadow would reject %d: want fewer, more than none", pe.Rejected, pe.Requests, pe.Admitted, ps.WouldReject)
	}
	for reason := range pe.Reasons {
		if reason != "queue_full" && reason != "queue_timeout" {
			t.Errorf("enforcing queue rejected for %s, want queue_full or queue_timeout only (%v)", reason, pe.Reasons)
		}
	}
	if pe.Reasons["queue_full"] == 0 || pe.Reasons["queue_timeout"] == 0 {
		t.Errorf("reasons %v: the test wants both a full queue and timeouts", pe.Reasons)
	}
}

// A begin_only record (a request whose body the gateway refused after
// its request rate admitted it) spends the policies Begin decides and no
// other, through a candidate that queues as through one that does not:
// the token rate and the concurrency cap never see it, the request rate
// counts it once, admitted or rejected.
func TestReplayBeginOnly(t *testing.T) {
	log := logLines(t,
		"0 acme tokens=10",
		"0.1 acme begin=1",
		"0.2 acme begin=1",
		"0.3 acme tokens=10", // over the request rate
		"0.4 acme begin=1",   // over the request rate
		"0.5 other tokens=10",
	)
	rate := admission.Policy{Name: "rpm", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 3, Per: time.Hour}
	tokens := admission.Policy{Name: "tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Hour}
	conc := admission.Policy{Name: "conc", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 2, Timeout: time.Second}}
	rep := replayLog(t, log, cand("plain", rate, tokens), cand("queued", rate, tokens, conc))
	// matched, admitted, rejected: the second request of acme over the
	// rate bypasses the others; the begin_only ones never match them.
	want := map[string][3]int64{"rpm": {6, 4, 2}, "tpm": {3, 2, 0}, "conc": {3, 2, 0}}
	for _, c := range rep.Candidates {
		if c.Requests != 6 || c.Admitted != 4 || c.Rejected != 2 {
			t.Errorf("%s: %d requests, %d admitted, %d rejected; want 6, 4, 2", c.Candidate, c.Requests, c.Admitted, c.Rejected)
		}
		for _, p := range c.Policies {
			if w := want[p.Policy]; p.Requests != w[0] || p.Admitted != w[1] || p.Rejected != w[2] {
				t.Errorf("%s: policy %s matched %d, admitted %d, rejected %d; want %d, %d, %d", c.Candidate, p.Policy, p.Requests, p.Admitted, p.Rejected, w[0], w[1], w[2])
			}
		}
	}
}

// A log's sessions are replayed: a candidate session budget counts each
// session of a tenant apart, and requests without a session not at all,
// while the tenant's own policy counts them all.
func TestReplaySessions(t *testing.T) {
	// Each model call is one step, as llmproxy logs it.
	log := logLines(t,
		"0 acme session=run-1 steps=1", "1 acme session=run-1 steps=1", "2 acme session=run-1 steps=1", // the third over the budget
		"3 acme session=run-2 steps=1", "4 acme session=run-2 steps=1",
		"5 globex session=run-1 steps=1", "6 globex session=run-1 steps=1", // another tenant's run-1
		"7 acme steps=1", "8 acme steps=1", "9 acme steps=1", // no session
	)
	budget := admission.Policy{Name: "session-steps", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Unit: limits.UnitSteps, Algorithm: limits.Quota, Limit: 2, Per: time.Hour}
	tenant := admission.Policy{Name: "rph", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 100, Per: time.Hour}
	// No record has a step fingerprint: a loop policy matches nothing.
	loops := admission.Policy{Name: "loops", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint},
		Algorithm: limits.SlidingLog, Limit: 1, Per: time.Hour, Overflow: limits.OverflowEvict}
	rep := replayLog(t, log, cand("budget", budget, tenant, loops))
	// The refused step bypasses the tenant's policy.
	want := map[string][3]int64{"session-steps": {7, 6, 1}, "rph": {10, 9, 0}, "loops": {0, 0, 0}}
	c := rep.Candidates[0]
	if c.Requests != 10 || c.Rejected != 1 {
		t.Errorf("%d requests, %d rejected; want 10, 1", c.Requests, c.Rejected)
	}
	for _, p := range c.Policies {
		if w := want[p.Policy]; p.Requests != w[0] || p.Admitted != w[1] || p.Rejected != w[2] {
			t.Errorf("policy %s matched %d, admitted %d, rejected %d; want %d, %d, %d", p.Policy, p.Requests, p.Admitted, p.Rejected, w[0], w[1], w[2])
		}
	}
}

// A log's step fingerprints are replayed: a candidate loop policy counts
// each step of each session apart, and a request without a session or
// without a step not at all, as it does live.
func TestReplayLoops(t *testing.T) {
	log := logLines(t,
		"0 acme session=run-1 step=1", "1 acme session=run-1 step=1", // the second over the loop policy
		"2 acme session=run-1 step=2", "3 acme session=run-2 step=1",
		"4 acme step=1", "5 acme session=run-1", // no session, no step: not counted
	)
	loops := admission.Policy{Name: "loops", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint},
		Algorithm: limits.SlidingLog, Limit: 1, Per: time.Hour, Overflow: limits.OverflowEvict}
	c := replayLog(t, log, cand("loops", loops)).Candidates[0]
	if c.Requests != 6 || c.Rejected != 1 {
		t.Errorf("%d requests, %d rejected; want 6, 1", c.Requests, c.Rejected)
	}
	if p := c.Policies[0]; p.Requests != 4 || p.Admitted != 3 || p.Rejected != 1 {
		t.Errorf("loops matched %d, admitted %d, rejected %d; want 4, 3, 1", p.Requests, p.Admitted, p.Rejected)
	}
}

// The same log and candidates give the same report, byte for byte.
func TestReplayDeterministic(t *testing.T) {
	log := randomLog(t, 11, 3000)
	cands := []replay.Candidate{
		cand("a", rpm(limits.Enforce), admission.Policy{Name: "conc", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 2, Mode: limits.Shadow}),
		cand("b", admission.Policy{Name: "tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 5000, Per: time.Second}),
		// Queues: requests wait on goroutines of their own.
		cand("c", rpm(limits.Enforce), admission.Policy{Name: "qconc", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 2,
			Queue: limits.Queue{Size: 3, Timeout: 700 * time.Millisecond, Order: limits.NewestFirst}}),
		cand("d", admission.Policy{Name: "qrate", Algorithm: limits.TokenBucket, Limit: 20, Burst: 5, Per: time.Second,
			Queue: limits.Queue{Size: 10, Timeout: 400 * time.Millisecond}}),
	}
	var outs [3][]byte
	for i := range outs {
		rep := replayLog(t, log, cands...)
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(rep); err != nil {
			t.Fatal(err)
		}
		rep.WriteText(&b)
		outs[i] = b.Bytes()
	}
	if !bytes.Equal(outs[0], outs[1]) || !bytes.Equal(outs[0], outs[2]) {
		t.Errorf("reports differ between runs:\n%s\n%s", outs[0], outs[1])
	}
}

// Tenants beyond MaxTenants are counted as __other__.
func TestReplayMaxTenants(t *testing.T) {
	var specs []string
	for i := range 10 {
		specs = append(specs, fmt.Sprintf("0 t%d", i), fmt.Sprintf("0 t%d", i), fmt.Sprintf("0 t%d", i))
	}
	p := admission.Policy{Name: "one", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute}
	rp, err := replay.NewReplayer(replay.Config{MaxTenants: 3, TopTenants: 5}, cand("c", p))
	if err != nil {
		t.Fatal(err)
	}
	lr := requestlog.NewReader(strings.NewReader(logLines(t, specs...)))
	var rec requestlog.Record
	for lr.Read(&rec) == nil {
		rp.Add(&rec)
	}
	rp.Finish()
	top := rp.Report().Candidates[0].Policies[0].Tenants
	var got []string
	for _, tr := range top {
		got = append(got, fmt.Sprintf("%s:%d/%d", tr.Tenant, tr.Rejected, tr.Requests))
	}
	if s := strings.Join(got, " "); s != "__other__:14/21 t0:2/3 t1:2/3 t2:2/3" {
		t.Errorf("top tenants = %q", s)
	}
}

// Records out of time order are replayed at the time before them.
func TestReplayReordered(t *testing.T) {
	rep := replayLog(t, logLines(t, "1 acme", "0 acme", "0.5 acme", "2 acme"), cand("c", rpm(limits.Enforce)))
	if rep.Reordered != 2 || rep.Candidates[0].Rejected != 1 {
		t.Errorf("Reordered = %d, Rejected = %d; want 2, 1", rep.Reordered, rep.Candidates[0].Rejected)
	}
}

// The report says how late the latest out-of-order record was; a
// Reorder of that much replays every record at its own time.
func TestReplayReorderWindow(t *testing.T) {
	log := logLines(t, "1 acme", "0 acme", "0.5 acme", "2 acme")
	rep := replayLog(t, log, cand("c", rpm(limits.Enforce)))
	if rep.Reordered != 2 || rep.Lateness != time.Second {
		t.Errorf("Reordered = %d, Lateness = %s; want 2, 1s", rep.Reordered, rep.Lateness)
	}
	got, err := replay.Run(context.Background(), strings.NewReader(log), replay.Config{Reorder: time.Second}, cand("c", rpm(limits.Enforce)))
	if err != nil {
		t.Fatal(err)
	}
	sorted := replayLog(t, logLines(t, "0 acme", "0.5 acme", "1 acme", "2 acme"), cand("c", rpm(limits.Enforce)))
	if got.Reordered != 0 || got.Candidates[0].Rejected != sorted.Candidates[0].Rejected || got.Candidates[0].Admitted != sorted.Candidates[0].Admitted {
		t.Errorf("with Reorder 1s: reordered %d, %+v; the sorted log gives %+v", got.Reordered, got.Candidates[0], sorted.Candidates[0])
	}
}

func TestReplayErrors(t *testing.T) {
	if _, err := replay.NewReplayer(replay.Config{}); err == nil {
		t.Error("NewReplayer without candidates succeeded")
	}
	bad := admission.Policy{Name: "x", Algorithm: limits.TokenBucket}
	if _, err := replay.NewReplayer(replay.Config{}, cand("bad", bad)); err == nil || !strings.Contains(err.Error(), "candidate bad") {
		t.Errorf("NewReplayer(invalid policy) = %v; want an error naming the candidate", err)
	}
	_, err := replay.Run(context.Background(), strings.NewReader(logLines(t, "0 acme")+"{}\n"), replay.Config{}, cand("c", rpm(0)))
	if err == nil || !strings.HasPrefix(err.Error(), "line 2: ") {
		t.Errorf("Run(malformed line 2) = %v", err)
	}
}

// OnRecordError sees each malformed line in log order, after the records
// before it were replayed: nil skips the line, an error stops the replay
// with it; without one the first malformed line stops the replay.
func TestReplayOnRecordError(t *testing.T) {
	good := func(s string) string { return logLines(t, s) }
	log := good("0 acme") + "{}\n" + good("0.1 acme") + "not json\n" + good("0.2 acme")
	errStop := errors.New("stop")
	type call struct {
		line     int
		replayed int64 // records replayed when it was called
	}
	tests := []struct {
		name      string
		stopAt    int  // the line whose error stops the replay; 0 skips all
		nilFunc   bool // no OnRecordError
		wantErr   string
		wantCalls []call
		// the replay's counts when AddLog returns
		wantRecords, wantSkipped, wantRejected int64
	}{
		{name: "skip", wantCalls: []call{{2, 1}, {4, 2}}, wantRecords: 3, wantSkipped: 2, wantRejected: 1},
		{name: "stop", stopAt: 4, wantErr: "stop", wantCalls: []call{{2, 1}, {4, 2}}, wantRecords: 2, wantSkipped: 1},
		{name: "nil", nilFunc: true, wantErr: "line 2: ", wantRecords: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rp *replay.Replayer
			var calls []call
			cfg := replay.Config{OnRecordError: func(re *requestlog.RecordError) error {
				calls = append(calls, call{re.Line, rp.Report().Records})
				if re.Line == tt.stopAt {
					return errStop
				}
				return nil
			}}
			if tt.nilFunc {
				cfg.OnRecordError = nil
			}
			rp, err := replay.NewReplayer(cfg, cand("c", rpm(limits.Enforce)))
			if err != nil {
				t.Fatal(err)
			}
			err = rp.AddLog(context.Background(), strings.NewReader(log))
			switch {
			case tt.wantErr == "" && err != nil, tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)):
				t.Errorf("AddLog = %v; want %q", err, tt.wantErr)
			case tt.stopAt != 0 && !errors.Is(err, errStop):
				t.Errorf("AddLog = %v; want errStop", err)
			}
			if !reflect.DeepEqual(calls, tt.wantCalls) {
				t.Errorf("OnRecordError calls (line, replayed) = %v; want %v", calls, tt.wantCalls)
			}
			rp.Finish()
			rep := rp.Report()
			if rep.Records != tt.wantRecords || rep.Skipped != tt.wantSkipped || rep.Candidates[0].Rejected != tt.wantRejected {
				t.Errorf("Records, Skipped, Rejected = %d, %d, %d; want %d, %d, %d", rep.Records, rep.Skipped,
					rep.Candidates[0].Rejected, tt.wantRecords, tt.wantSkipped, tt.wantRejected)
			}
		})
	}
}

// Malformed lines spread over many read-ahead batches are seen in order,
// each after exactly the records before it, and a run of them longer
// than a batch is read like any other.
func TestReplayOnRecordErrorBatches(t *testing.T) {
	var b strings.Builder
	var wantLines []int
	var wantReplayed []int64
	var good int64
	line := 0
	add := func(ok bool) {
		line++
		if ok {
			b.WriteString(logLines(t, fmt.Sprintf("%d acme", line)))
			good++
			return
		}
		b.WriteString("not json\n")
		wantLines = append(wantLines, line)
		wantReplayed = append(wantReplayed, good)
	}
	for i := range 5000 {
		add(i%3 != 1)
	}
	for range 3000 {
		add(false)
	}
	add(true)
	var rp *replay.Replayer
	var lines []int
	var replayed []int64
	rp, err := replay.NewReplayer(replay.Config{OnRecordError: func(re *requestlog.RecordError) error {
		lines = append(lines, re.Line)
		replayed = append(replayed, rp.Report().Records)
		return nil
	}}, cand("c", rpm(limits.Shadow)))
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.AddLog(context.Background(), strings.NewReader(b.String())); err != nil {
		t.Fatalf("AddLog = %v", err)
	}
	if !slices.Equal(lines, wantLines) || !slices.Equal(replayed, wantReplayed) {
		t.Errorf("OnRecordError saw %d lines, not in order or not after the records before them", len(lines))
	}
	if rep := rp.Report(); rep.Records != good || rep.Skipped != int64(len(wantLines)) {
		t.Errorf("Records, Skipped = %d, %d; want %d, %d", rep.Records, rep.Skipped, good, len(wantLines))
	}
}

// WriteText leaves out the refused tokens and cost columns when no record
// estimates them, says so under the table, and counts skipped lines in
// its first line.
func TestReplayTextColumns(t *testing.T) {
	tests := []struct {
		name, extra string
		skip        bool // add a malformed line, skipped
		wantFirst   string
		wantHeader  string
		wantNote    string // the line under the table; "" for none
	}{
		{"requests", "", false, "replayed 2 requests over 1s through 1 candidate(s)",
			"CANDIDATE POLICY MODE MATCHED ADMITTED REJECTED WOULD_REJECT REFUSED% PEAK_IN_FLIGHT",
			"(no record estimates tokens or cost: their columns are left out)"},
		{"tokens", " tokens=5", false, "replayed 2 requests over 1s through 1 candidate(s)",
			"CANDIDATE POLICY MODE MATCHED ADMITTED REJECTED WOULD_REJECT REFUSED% REFUSED_TOKENS PEAK_IN_FLIGHT",
			"(no record estimates cost: its column is left out)"},
		{"cost", " cost=7", true, "replayed 2 requests over 1s through 1 candidate(s); 1 malformed line(s) skipped",
			"CANDIDATE POLICY MODE MATCHED ADMITTED REJECTED WOULD_REJECT REFUSED% REFUSED_COST PEAK_IN_FLIGHT",
			"(no record estimates tokens: its column is left out)"},
		{"both", " tokens=5 cost=7", false, "replayed 2 requests over 1s through 1 candidate(s)",
			"CANDIDATE POLICY MODE MATCHED ADMITTED REJECTED WOULD_REJECT REFUSED% REFUSED_TOKENS REFUSED_COST PEAK_IN_FLIGHT",
			""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Only the second record estimates: one is enough.
			log := logLines(t, "0 acme", "1 acme"+tt.extra)
			if tt.skip {
				log = "{}\n" + log
			}
			cfg := replay.Config{OnRecordError: func(*requestlog.RecordError) error { return nil }}
			rep, err := replay.Run(context.Background(), strings.NewReader(log), cfg, cand("c", rpm(limits.Enforce)))
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := rep.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(b.String(), "\n")
			if lines[0] != tt.wantFirst {
				t.Errorf("first line = %q; want %q", lines[0], tt.wantFirst)
			}
			if h := strings.Join(strings.Fields(lines[2]), " "); h != tt.wantHeader {
				t.Errorf("header = %q; want %q", h, tt.wantHeader)
			}
			// The header, the candidate's row and the policy's, then the note.
			if got := lines[5]; got != tt.wantNote {
				t.Errorf("line under the table = %q; want %q\n%s", got, tt.wantNote, b.String())
			}
			for _, row := range lines[2:5] {
				if n := len(strings.Fields(row)); n != len(strings.Fields(tt.wantHeader)) {
					t.Errorf("row %q has %d cells; want one per column", row, n)
				}
			}
		})
	}

	// An empty log has nothing to say about its estimates.
	rep := replayLog(t, "", cand("c", rpm(limits.Enforce)))
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "left out") {
		t.Errorf("WriteText(empty log):\n%s", b.String())
	}
}

func TestReplayText(t *testing.T) {
	log := logLines(t, "0 acme dur=1s", "0 acme", "0 acme tokens=10", "0.5 acme", "0.5 acme tokens=5", "0.5 beta dur=2s", "1 beta")
	rep := replayLog(t, log,
		cand("enforce.yaml", rpm(limits.Enforce), admission.Policy{Name: "conc", Algorithm: limits.Concurrency, Limit: 1}),
		cand("shadow.yaml", rpm(limits.Shadow), admission.Policy{Name: "conc", Algorithm: limits.Concurrency, Limit: 1, Mode: limits.Shadow}))
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	shadowtest.Golden(t, "replay.golden", b.Bytes())
}

// BenchmarkReplay replays a log of multi-tenant traffic through two
// candidates of three policies each; records/s is the figure to read.
// BenchmarkParse is the parsing share of it.
func BenchmarkReplay(b *testing.B) {
	log := randomLog(b, 3, 100_000)
	cands := []replay.Candidate{
		cand("a", rpm(limits.Enforce),
			admission.Policy{Name: "tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.SlidingWindow, Limit: 20_000, Per: time.Second},
			admission.Policy{Name: "conc", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 4, Mode: limits.Shadow}),
		cand("b", admission.Policy{Name: "rpm", Key: shadowtest.TenantKey(), Algorithm: limits.TokenBucket, Limit: 10, Per: time.Second, Mode: limits.Shadow},
			admission.Policy{Name: "tpm", Key: shadowtest.TenantKey(), Unit: limits.UnitTokens, Algorithm: limits.TokenBucket, Limit: 10_000, Per: time.Second},
			admission.Policy{Name: "conc", Algorithm: limits.Concurrency, Limit: 50}),
	}
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := replay.Run(context.Background(), strings.NewReader(log), replay.Config{}, cands...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*100_000/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkParse(b *testing.B) {
	log := randomLog(b, 3, 100_000)
	b.SetBytes(int64(len(log)))
	b.ReportAllocs()
	for b.Loop() {
		lr := requestlog.NewReader(strings.NewReader(log))
		var rec requestlog.Record
		for lr.Read(&rec) == nil {
		}
	}
	b.ReportMetric(float64(b.N)*100_000/b.Elapsed().Seconds(), "records/s")
}

// A replay stopped by a malformed line gives up the requests waiting in
// its queues: no goroutine is left behind.
func TestReplayStoppedLeavesNoWaiters(t *testing.T) {
	queued := admission.Policy{Name: "q", Key: shadowtest.TenantKey(), Algorithm: limits.Concurrency, Limit: 1, Queue: limits.Queue{Size: 10}}
	log := logLines(t, "0 acme dur=10s", "0.1 acme dur=1s", "0.2 acme dur=1s") + "not json\n"
	before := runtime.NumGoroutine()
	if _, err := replay.Run(context.Background(), strings.NewReader(log), replay.Config{}, cand("c", queued)); err == nil {
		t.Fatal("no error for the malformed line")
	}
	poll.Until(t, time.Second, fmt.Sprintf("the goroutines to end (%d before the replay)", before), func() bool { return runtime.NumGoroutine() <= before })
}

// A tenant named like the overflow bucket, or with a name too long,
// invalid or holding control characters, is counted under its own safe
// name: never merged with __other__, never printed raw.
func TestReplayHostileTenantNames(t *testing.T) {
	long := strings.Repeat("L", 5000)
	// One request each, past the limit of 1 per minute: each tenant is
	// refused once. "c" and "d" overflow MaxTenants into __other__.
	var b strings.Builder
	for _, tenant := range []string{"a", "__other__", long, "x\x1b[2Jy", "c", "d"} {
		for range 2 {
			r := requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: tenant}}
			b.Write(r.AppendJSON(nil))
			b.WriteByte('\n')
		}
	}
	p := admission.Policy{Name: "one", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute}
	rep, err := replay.Run(context.Background(), strings.NewReader(b.String()), replay.Config{MaxTenants: 4, TopTenants: 10}, cand("c", p))
	if err != nil {
		t.Fatal(err)
	}
	pr := rep.Candidates[0].Policies[0]
	got := map[string]string{}
	var names []string
	for _, tf := range pr.Tenants {
		names = append(names, fmt.Sprintf("%.40q", tf.Tenant))
		if len(tf.Tenant) > 128 || strings.ContainsAny(tf.Tenant, "\x1b") {
			t.Errorf("tenant %.60q reported raw", tf.Tenant)
		}
		got[tf.Tenant] = fmt.Sprintf("%d/%d", tf.Rejected, tf.Requests)
	}
	if g := got["__other__"]; g != "2/4" {
		t.Errorf("__other__ = %s; want 2/4 (c and d only)", g)
	}
	if len(got) != 5 {
		t.Errorf("tenants %v; want a, the three hostile ones by safe names, __other__", names)
	}
	for name, g := range got {
		if name != "__other__" && g != "1/2" {
			t.Errorf("%.60q = %s; want 1/2", name, g)
		}
	}
	for _, ts := range pr.Series.Tenants {
		if len(ts.Tenant) > 128 {
			t.Errorf("series tenant %.60q reported raw", ts.Tenant)
		}
	}
}

// Refused amounts, each at most limits.MaxAmount, saturate when their
// sum passes the largest int64 rather than wrap to a negative figure.
func TestReplayRefusedCostSaturates(t *testing.T) {
	var b strings.Builder
	r := requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "acme", Tokens: limits.MaxAmount, Cost: limits.MaxAmount,
		Units: []admission.UnitAmount{{Unit: "images", Amount: limits.MaxAmount}}}}
	line := r.AppendJSON(nil)
	for range 8193 { // 8192 refused, of 2^50 each: 2^63
		b.Write(line)
		b.WriteByte('\n')
	}
	p := admission.Policy{Name: "one", Key: shadowtest.TenantKey(), Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute}
	rep := replayLog(t, b.String(), cand("c", p))
	pr := rep.Candidates[0].Policies[0]
	if pr.Rejected != 8192 {
		t.Fatalf("rejected %d; want 8192", pr.Rejected)
	}
	const maxInt64 = 1<<63 - 1
	if rc := pr.RefusedCost; rc.Tokens != maxInt64 || rc.Cost != maxInt64 || rc.Units["images"] != maxInt64 {
		t.Errorf("refused cost = %+v; want every amount saturated at %d", rc, int64(maxInt64))
	}
}
