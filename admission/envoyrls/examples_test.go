package envoyrls_test

import (
	"math"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// step is one call of a scenario: the descriptors, how many times the call
// is made, and the codes every one of those calls must get (the last one
// also the remaining figures of its descriptors, -1 for "no limit").
type step struct {
	advance   time.Duration
	domain    string
	ds        [][]string
	times     int
	want      string
	remaining []int64
}

func runSteps(t *testing.T, r *rig, steps []step) {
	t.Helper()
	for i, s := range steps {
		r.clk.Advance(s.advance)
		n := max(s.times, 1)
		for k := range n {
			ds := make([]*rlv3.RateLimitDescriptor, len(s.ds))
			for j, kv := range s.ds {
				ds[j] = desc(kv...)
			}
			resp := r.call(s.domain, ds...)
			if got := outcome(resp); got != s.want {
				t.Fatalf("step %d, call %d of %d: ShouldRateLimit(%s, %v) = %s; want %s", i, k+1, n, s.domain, s.ds, got, s.want)
			}
			if k < n-1 || s.remaining == nil {
				continue
			}
			for j, want := range s.remaining {
				st := resp.Statuses[j]
				got := int64(st.LimitRemaining)
				if st.CurrentLimit == nil && st.LimitRemaining == 0 {
					got = -1
				}
				if got != want {
					t.Errorf("step %d: descriptor %d remaining = %d; want %d (%v)", i, j, got, want, st)
				}
			}
		}
	}
}

// TestRatelimitExamples reproduces the examples of envoyproxy/ratelimit's
// documentation with the answers it documents (fixed windows per unit,
// the most specific match, one level per entry, unlimited, shadow,
// replaces, wildcards), the configurations loaded as they are written.
func TestRatelimitExamples(t *testing.T) {
	cases := []struct {
		file  string
		steps []step
	}{
		{"example1.yaml", []step{
			{domain: "mongo_cps", ds: [][]string{{"database", "users"}}, times: 500, want: "OK: OK"},
			{domain: "mongo_cps", ds: [][]string{{"database", "users"}}, want: "OVER_LIMIT: OVER_LIMIT", remaining: []int64{0}},
			// The other value has its own limit; a value not configured has none.
			{domain: "mongo_cps", ds: [][]string{{"database", "default"}}, want: "OK: OK", remaining: []int64{499}},
			{domain: "mongo_cps", ds: [][]string{{"database", "other"}}, want: "OK: OK", remaining: []int64{-1}},
			// The next second is a new window.
			{advance: time.Second, domain: "mongo_cps", ds: [][]string{{"database", "users"}}, want: "OK: OK", remaining: []int64{499}},
		}},
		{"example2.yaml", []step{
			{domain: "messaging", ds: [][]string{{"message_type", "marketing", "to_number", "2061111111"}, {"to_number", "2061111111"}}, times: 5, want: "OK: OK OK", remaining: []int64{0, 95}},
			// The sixth marketing message is refused: a logical OR.
			{domain: "messaging", ds: [][]string{{"message_type", "marketing", "to_number", "2061111111"}, {"to_number", "2061111111"}}, want: "OVER_LIMIT: OVER_LIMIT OK", remaining: []int64{0, 95}},
			// Another number has its own 5 a day.
			{domain: "messaging", ds: [][]string{{"message_type", "marketing", "to_number", "2062222222"}}, want: "OK: OK", remaining: []int64{4}},
			{domain: "messaging", ds: [][]string{{"to_number", "2061111111"}}, times: 95, want: "OK: OK"},
			{domain: "messaging", ds: [][]string{{"to_number", "2061111111"}}, want: "OVER_LIMIT: OVER_LIMIT"},
			{advance: 24 * time.Hour, domain: "messaging", ds: [][]string{{"to_number", "2061111111"}}, want: "OK: OK", remaining: []int64{99}},
		}},
		{"example3.yaml", []step{
			{domain: "edge_proxy_per_ip", ds: [][]string{{"remote_address", "50.0.0.1"}}, times: 10, want: "OK: OK"},
			{domain: "edge_proxy_per_ip", ds: [][]string{{"remote_address", "50.0.0.1"}}, want: "OVER_LIMIT: OVER_LIMIT"},
			{domain: "edge_proxy_per_ip", ds: [][]string{{"remote_address", "50.0.0.2"}}, want: "OK: OK", remaining: []int64{9}},
			// The blacklisted address: 0 per second, the most specific match.
			{domain: "edge_proxy_per_ip", ds: [][]string{{"remote_address", "50.0.0.5"}}, want: "OVER_LIMIT: OVER_LIMIT", remaining: []int64{0}},
		}},
		{"example4.yaml", []step{
			// Two entries do not match a one-level rule...
			{domain: "example4", ds: [][]string{{"key", "value", "subkey", "subvalue"}}, want: "OK: OK", remaining: []int64{-1}},
			{domain: "example4", ds: [][]string{{"key", "value"}}, want: "OK: OK", remaining: []int64{299}},
			// ...but match a two-level one.
			{domain: "example4_nested", ds: [][]string{{"key", "value", "subkey", "subvalue"}}, want: "OK: OK", remaining: []int64{299}},
			{domain: "example4_nested", ds: [][]string{{"key", "value"}}, want: "OK: OK", remaining: []int64{-1}},
		}},
		{"example5.yaml", []step{
			{domain: "internal", ds: [][]string{{"ldap", "x"}}, times: 1000, want: "OK: OK", remaining: []int64{math.MaxUint32}},
			{domain: "internal", ds: [][]string{{"azure", "x"}}, times: 100, want: "OK: OK"},
			{domain: "internal", ds: [][]string{{"azure", "x"}}, want: "OVER_LIMIT: OVER_LIMIT"},
		}},
		{"example6.yaml", []step{
			// user-a is in shadow mode: never limited.
			{domain: "example6", ds: [][]string{{"service", "auth-service", "user", "user-a"}}, times: 30, want: "OK: OK"},
			{domain: "example6", ds: [][]string{{"service", "auth-service", "user", "user-b"}}, times: 20, want: "OK: OK"},
			{domain: "example6", ds: [][]string{{"service", "auth-service", "user", "user-b"}}, want: "OVER_LIMIT: OVER_LIMIT"},
		}},
		{"example7.yaml", []step{
			// Both rules match: only the replacing 10/s applies, and the
			// replaced 5/s is not charged.
			{domain: "example7", ds: [][]string{{"key_1", "value_1", "user", "bkthomps"}, {"key_2", "value_2", "user", "bkthomps"}}, times: 10, want: "OK: OK OK", remaining: []int64{-1, 0}},
			{domain: "example7", ds: [][]string{{"key_1", "value_1", "user", "bkthomps"}, {"key_2", "value_2", "user", "bkthomps"}}, want: "OVER_LIMIT: OK OVER_LIMIT"},
			{domain: "example7", ds: [][]string{{"key_1", "value_1", "user", "bkthomps"}}, times: 5, want: "OK: OK"},
			{domain: "example7", ds: [][]string{{"key_1", "value_1", "user", "bkthomps"}}, want: "OVER_LIMIT: OVER_LIMIT"},
		}},
		{"example8.yaml", []step{
			{domain: "example8", ds: [][]string{{"key1", "unspecified_value"}}, times: 10, want: "OK: OK"},
			{domain: "example8", ds: [][]string{{"key1", "unspecified_value"}}, want: "OVER_LIMIT: OVER_LIMIT"},
			{domain: "example8", ds: [][]string{{"key1", "unspecified_value2"}}, want: "OK: OK", remaining: []int64{9}},
			{domain: "example8", ds: [][]string{{"key1", "value1"}}, times: 20, want: "OK: OK"},
			{domain: "example8", ds: [][]string{{"key1", "value1"}}, want: "OVER_LIMIT: OVER_LIMIT"},
		}},
		{"example9.yaml", []step{
			{domain: "example9", ds: [][]string{{"key1", "value_1"}}, times: 20, want: "OK: OK"},
			{domain: "example9", ds: [][]string{{"key1", "value_1"}}, want: "OVER_LIMIT: OVER_LIMIT"},
			{domain: "example9", ds: [][]string{{"key1", "value_2"}}, want: "OK: OK", remaining: []int64{19}},
			{domain: "example9", ds: [][]string{{"key1", "other"}}, want: "OK: OK", remaining: []int64{-1}},
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			r := start(t, mustLoad(t, "ratelimit/"+c.file), rigOption{})
			runSteps(t, r, c.steps)
		})
	}
}

// TestRatelimitDirectory loads the examples as envoyproxy/ratelimit loads
// its runtime directory: every file, each domain once.
func TestRatelimitDirectory(t *testing.T) {
	cfg := mustLoad(t, "ratelimit")
	if got := len(cfg.Domains()); got != 10 {
		t.Fatalf("Load(testdata/ratelimit) has %d domains (%v); want 10", got, cfg.Domains())
	}
	r := start(t, cfg, rigOption{})
	resp := r.call("example6", desc("service", "auth-service", "user", "user-b"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 20 {
		t.Fatalf("example6 user-b = %v; want OK under 20 per second", resp)
	}
}
