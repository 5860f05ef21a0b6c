package shadow_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
)

func ptr[T any](v T) *T { return &v }

func wouldReject(tenant string) admission.Decision {
	return admission.Decision{
		Status:  admission.Status{Policy: "tpm", Mode: limits.Shadow, Unit: limits.UnitTokens, Limit: 1000, Window: time.Minute},
		Outcome: admission.WouldReject, Reason: admission.ReasonRate, Tenant: tenant, Cost: 300, RetryAfter: 2 * time.Second,
	}
}

func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		out = append(out, m)
	}
	buf.Reset()
	return out
}

func TestLogRateLimit(t *testing.T) {
	clk := admissiontest.NewClock(shadowtest.T0)
	var buf bytes.Buffer
	l, err := shadow.NewLog(shadow.LogConfig{Rate: 1, Burst: 2}, shadow.WithClock(clk),
		shadow.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance      time.Duration
		decisions    int
		records      int
		suppressed   uint64  // Suppressed() after the step
		firstCarries float64 // the "suppressed" field of the step's first record
	}{
		{0, 5, 2, 3, 0},
		{time.Second, 1, 1, 3, 3},
		{0, 1, 0, 4, 0},
		{10 * time.Second, 3, 2, 5, 1},
	}
	for i, s := range steps {
		clk.Advance(s.advance)
		for range s.decisions {
			l.Decision(ptr(wouldReject("acme")))
		}
		recs := records(t, &buf)
		if len(recs) != s.records {
			t.Fatalf("step %d: %d records; want %d", i, len(recs), s.records)
		}
		if got := l.Suppressed(); got != s.suppressed {
			t.Errorf("step %d: Suppressed() = %d; want %d", i, got, s.suppressed)
		}
		if len(recs) > 0 && recs[0]["suppressed"] != s.firstCarries {
			t.Errorf("step %d: suppressed field = %v; want %v", i, recs[0]["suppressed"], s.firstCarries)
		}
	}
}

func TestLogRecord(t *testing.T) {
	var buf bytes.Buffer
	l, err := shadow.NewLog(shadow.LogConfig{RejectSample: 2}, shadow.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	l.Decision(ptr(wouldReject("acme")))
	rec := records(t, &buf)[0]
	want := map[string]any{
		"msg": "shadow policy would reject", "level": "INFO", "policy": "tpm", "mode": "shadow",
		"decision": "would_reject", "reason": "rate", "tenant": "acme", "cost": 300.0, "unit": "tokens",
		"limit": 1000.0, "retry_after_s": 2.0, "queue_wait_s": 0.0, "reset_s": 0.0, "window_s": 60.0,
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("record[%q] = %v; want %v", k, rec[k], v)
		}
	}
	// Admitted decisions are not logged; one enforced rejection in two is.
	l.Decision(&admission.Decision{Status: admission.Status{Policy: "tpm"}, Outcome: admission.Admitted})
	rej := wouldReject("acme")
	rej.Outcome, rej.Mode = admission.Rejected, limits.Enforce
	for range 4 {
		l.Decision(&rej)
	}
	recs := records(t, &buf)
	if len(recs) != 2 {
		t.Fatalf("%d records; want 2 (half of 4 rejections)", len(recs))
	}
	if recs[0]["level"] != "WARN" {
		t.Errorf("rejection level = %v; want WARN", recs[0]["level"])
	}
}

// A decision's session is in its record, as the id or as its
// pseudonym; a decision without one has no session field.
func TestLogSession(t *testing.T) {
	for _, hash := range []bool{false, true} {
		var buf bytes.Buffer
		l, err := shadow.NewLog(shadow.LogConfig{HashSessions: hash}, shadow.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
		if err != nil {
			t.Fatal(err)
		}
		d := wouldReject("acme")
		l.Decision(&d)
		d.Session = "agent-run-42"
		l.Decision(&d)
		recs := records(t, &buf)
		if len(recs) != 2 {
			t.Fatalf("%d records; want 2", len(recs))
		}
		if s, ok := recs[0]["session"]; ok {
			t.Errorf("hash=%v: a decision without a session logged session=%v", hash, s)
		}
		want := "agent-run-42"
		if hash {
			want = apikey.HashSession(want)
		}
		if recs[1]["session"] != want || recs[1]["tenant"] != "acme" {
			t.Errorf("hash=%v: record %v; want session %q for tenant acme", hash, recs[1], want)
		}
	}
}

func TestNewLogValidates(t *testing.T) {
	if _, err := shadow.NewLog(shadow.LogConfig{Rate: -1, Burst: -1, RejectSample: -1, AdmitSample: -1}); err == nil ||
		strings.Count(err.Error(), "\n") != 3 {
		t.Errorf("NewLog(bad config) = %v; want four problems", err)
	}
}

// AdmitSample logs one admitted decision in AdmitSample, at the log's
// level, within the same rate limit.
func TestLogAdmitSample(t *testing.T) {
	for _, tc := range []struct{ sample, decisions, want int }{
		{0, 10, 0}, {1, 10, 10}, {3, 10, 3}, {10, 25, 2},
	} {
		var buf bytes.Buffer
		l, err := shadow.NewLog(shadow.LogConfig{AdmitSample: tc.sample, Burst: 100}, shadow.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
		if err != nil {
			t.Fatal(err)
		}
		for range tc.decisions {
			l.Decision(&admission.Decision{Status: admission.Status{Policy: "rpm", Mode: limits.Enforce}, Outcome: admission.Admitted, Tenant: "acme"})
		}
		recs := records(t, &buf)
		if len(recs) != tc.want {
			t.Errorf("AdmitSample %d, %d admitted decisions: %d records; want %d", tc.sample, tc.decisions, len(recs), tc.want)
		}
		for _, r := range recs {
			if r["decision"] != "admitted" || r["level"] != "INFO" {
				t.Errorf("AdmitSample %d: record %v; want an admitted decision at INFO", tc.sample, r)
			}
		}
	}
}

func TestRecorderReport(t *testing.T) {
	clk := admissiontest.NewClock(shadowtest.T0)
	r, err := shadow.NewRecorder(shadow.RecorderConfig{Window: time.Minute, Buckets: 6}, shadow.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	admitted := func(tenant string) admission.Decision {
		d := wouldReject(tenant)
		d.Outcome, d.Reason = admission.Admitted, admission.ReasonNone
		return d
	}
	// 100 requests: noisy sends 20 and 18 would be rejected; quiet sends
	// 80 and 2 would be rejected.
	for i := range 20 {
		if i < 18 {
			r.Decision(ptr(wouldReject("noisy")))
		} else {
			r.Decision(ptr(admitted("noisy")))
		}
	}
	for i := range 80 {
		if i < 2 {
			r.Decision(ptr(wouldReject("quiet")))
		} else {
			r.Decision(ptr(admitted("quiet")))
		}
	}
	r.Decision(&admission.Decision{Status: admission.Status{Policy: "tpm"}, Outcome: admission.Queued})

	rep := r.Report(5)
	if len(rep.Policies) != 1 {
		t.Fatalf("Report() has %d policies; want 1", len(rep.Policies))
	}
	p := rep.Policies[0]
	if p.Requests != 100 || p.Refused != 20 || p.Ratio != 0.2 {
		t.Errorf("policy: requests %d refused %d ratio %v; want 100, 20, 0.2", p.Requests, p.Refused, p.Ratio)
	}
	if len(p.Tenants) != 2 || p.Tenants[0].Tenant != "noisy" || p.Tenants[0].Share != 0.9 || p.Tenants[0].Ratio != 0.9 {
		t.Errorf("tenants = %+v; want noisy first with share 0.9 and ratio 0.9", p.Tenants)
	}
	want := "if enforced now, policy tpm would reject 20.0% of requests (20 of 100) over the last 1m0s, 90% of them from tenant noisy\n"
	if got := rep.String(); got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}

	// Half a window later the decisions still count; a full window later
	// they have left it.
	clk.Advance(30 * time.Second)
	if got := r.Report(5).Policies[0].Requests; got != 100 {
		t.Errorf("30s later: requests = %d; want 100", got)
	}
	clk.Advance(time.Minute)
	if got := len(r.Report(5).Policies); got != 0 {
		t.Errorf("90s later: %d policies reported; want 0", got)
	}
}

func TestRecorderBoundsTenants(t *testing.T) {
	r, err := shadow.NewRecorder(shadow.RecorderConfig{MaxTenants: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"a", "b", "c", "d", "e", "a"} {
		r.Decision(ptr(wouldReject(tenant)))
	}
	p := r.Report(10).Policies[0]
	got := map[string]int64{}
	for _, tr := range p.Tenants {
		got[tr.Tenant] = tr.Refused
	}
	if len(got) != 4 || got["a"] != 2 || got["c"] != 1 || got[shadow.OtherTenant] != 2 {
		t.Errorf("tenants = %v; want a:2 b:1 c:1 %s:2", got, shadow.OtherTenant)
	}
}

// TestRecorderHostileTenants: tenants whose names a caller may choose
// are reported under a name that is short, valid UTF-8 without control
// characters, distinct per tenant, and never the overflow bucket's. One
// case per attack class.
func TestRecorderHostileTenants(t *testing.T) {
	long := strings.Repeat("t", 1<<20)
	for _, tc := range []struct {
		name    string
		tenants []string
	}{
		{"invalid UTF-8", []string{"\xff\xfe", "acme\xc3"}},
		{"control characters", []string{"a\x00b", "a\rb", "a\x1b[31mb", "a\u0085b"}},
		{"very long", []string{long + "1", long + "2"}},
		{"the overflow bucket's name", []string{shadow.OtherTenant}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := shadow.NewRecorder(shadow.RecorderConfig{MaxTenants: len(tc.tenants) + 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, tenant := range tc.tenants {
				r.Decision(ptr(wouldReject(tenant)))
				r.Decision(ptr(wouldReject(tenant)))
			}
			// One ordinary tenant fills the table, the next two overflow.
			for _, tenant := range []string{"plain-1", "plain-2", "plain-3"} {
				r.Decision(ptr(wouldReject(tenant)))
			}
			got := map[string]int64{}
			for _, tr := range r.Report(100).Policies[0].Tenants {
				got[tr.Tenant] = tr.Refused
				if !utf8.ValidString(tr.Tenant) || len(tr.Tenant) > 128 {
					t.Errorf("tenant %.40q: want valid UTF-8 of at most 128 bytes", tr.Tenant)
				}
				for _, c := range tr.Tenant {
					if unicode.IsControl(c) {
						t.Errorf("tenant %q holds the control character %U", tr.Tenant, c)
					}
				}
			}
			if got[shadow.OtherTenant] != 2 || got["plain-1"] != 1 {
				t.Errorf("tenants = %v; want plain-1:1 and %s:2", got, shadow.OtherTenant)
			}
			named := 0
			for name, n := range got {
				if name != shadow.OtherTenant && !strings.HasPrefix(name, "plain-") {
					named++
					if n != 2 {
						t.Errorf("tenant %.40q refused %d; want 2", name, n)
					}
				}
			}
			if named != len(tc.tenants) {
				t.Errorf("%d hostile tenants reported apart; want %d (tenants %v)", named, len(tc.tenants), got)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	r1, _ := shadow.NewRecorder(shadow.RecorderConfig{})
	r2, _ := shadow.NewRecorder(shadow.RecorderConfig{})
	o := shadow.Join(r1, r2)
	o.Decision(ptr(wouldReject("a")))
	o.Settled(admission.Settlement{})
	o.LeaseExpired("p", 1)
	o.PartitionsEvicted("p", 1)
	o.StoreError(admission.StoreEvent{})
	if len(r1.Report(1).Policies) != 1 || len(r2.Report(1).Policies) != 1 {
		t.Error("Join did not pass the decision to every observer")
	}
	if _, ok := o.(backend.CallObserver); ok {
		t.Error("Join of observers without store calls wants store calls")
	}
	calls := &storeCalls{}
	o = shadow.Join(r1, calls)
	sc, ok := o.(backend.CallObserver)
	if !ok {
		t.Fatal("Join with a StoreCallObserver is not one")
	}
	sc.StoreCall(backend.Call{Store: "redis", Op: "batch"})
	if len(calls.got) != 1 || calls.got[0].Op != "batch" {
		t.Errorf("store calls passed on: %+v; want the one batch call", calls.got)
	}
}

// TestJoinPassesReleaseRetries: the metrics observer counts the
// concurrency releases its store failed (admission_release_retries_total,
// behind the AdmissionReleaseLost alert) only if the controller can tell
// it; joined with other observers, it must still be told.
func TestJoinPassesReleaseRetries(t *testing.T) {
	rec, _ := shadow.NewRecorder(shadow.RecorderConfig{})
	rel := &releases{}
	for _, o := range []admission.Observer{shadow.Join(rec, rel), shadow.Join(rec, rel, &storeCalls{})} {
		ro, ok := o.(admission.ReleaseObserver)
		if !ok {
			t.Fatalf("Join(%T...) is not an admission.ReleaseObserver: failed releases are never counted", rec)
		}
		ro.ReleaseRetry("conc", "abandoned")
	}
	if len(rel.got) != 2 || rel.got[0] != "conc/abandoned" {
		t.Errorf("release retries passed on: %v; want conc/abandoned twice", rel.got)
	}
}

type releases struct {
	admission.NopObserver
	got []string
}

func (r *releases) ReleaseRetry(policy, outcome string) { r.got = append(r.got, policy+"/"+outcome) }

type storeCalls struct {
	admission.NopObserver
	got []backend.Call
}

func (s *storeCalls) StoreCall(c backend.Call) { s.got = append(s.got, c) }

// TestLogDurationsInSeconds: every duration of a record is a number of
// seconds to the millisecond, in JSON and in text, never nanoseconds; a
// wait that cannot help is -1.
func TestLogDurationsInSeconds(t *testing.T) {
	d := wouldReject("acme")
	d.RetryAfter, d.QueueWait, d.Reset, d.Window = 11954624567*time.Nanosecond, 1020*time.Millisecond, 31*24*time.Hour, 31*24*time.Hour
	never := wouldReject("acme")
	never.RetryAfter = limits.Never
	for _, tc := range []struct {
		d    admission.Decision
		want map[string]any
		text []string
	}{
		{d, map[string]any{"retry_after_s": 11.955, "queue_wait_s": 1.02, "reset_s": 2678400.0, "window_s": 2678400.0},
			[]string{"retry_after_s=11.955 ", "queue_wait_s=1.02 ", "reset_s=2.6784e+06 "}},
		{never, map[string]any{"retry_after_s": -1.0}, []string{"retry_after_s=-1 "}},
	} {
		var buf bytes.Buffer
		l, _ := shadow.NewLog(shadow.LogConfig{}, shadow.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
		l.Decision(&tc.d)
		rec := records(t, &buf)[0]
		for k, v := range tc.want {
			if rec[k] != v {
				t.Errorf("record[%q] = %v; want %v", k, rec[k], v)
			}
		}
		for _, k := range []string{"retry_after", "queue_wait", "reset", "window"} {
			if v, ok := rec[k]; ok {
				t.Errorf("record has %q = %v; want only %q in seconds", k, v, k+"_s")
			}
		}
		l, _ = shadow.NewLog(shadow.LogConfig{}, shadow.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		l.Decision(&tc.d)
		for _, want := range tc.text {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("text record lacks %q: %s", want, buf.String())
			}
		}
	}
}
