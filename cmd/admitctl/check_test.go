package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/config"
)

// checkFile writes body as a policy file, runs check on it and returns the
// exit status, stdout and stderr with the file's path replaced by "F".
func checkFile(t *testing.T, body string, args ...string) (int, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runArgs("", append(append([]string{"check"}, args...), path)...)
	return code, strings.ReplaceAll(out, path, "F"), strings.ReplaceAll(errs, path, "F")
}

// TestCheckSuggests: a typo in a key, an enum value, a policy name or a
// plan name is answered with the nearest valid one, and every list of
// valid values is written one way.
func TestCheckSuggests(t *testing.T) {
	const ok = "  - {name: tenant-rpm, algorithm: token_bucket, limit: 10, per: 1m}\n"
	tests := []struct {
		name, file, want string
	}{
		{"key", "policies:\n  - name: a\n    algorythm: token_bucket\n    limit: 1\n    per: 1s\n",
			`F:3:5: policies[0].algorythm: unknown key "algorythm"; did you mean "algorithm"? (want one of name, description, match, key, unit, algorithm,`},
		{"key part", "policies:\n  - {name: a, algorithm: token_bucket, limit: 1, per: 1s, key: [tennant]}\n",
			`policies[0].key[0]: unknown key part "tennant"; did you mean "tenant"? (want one of global, tenant, key_id, user, ip, ip_prefix, model, operation, session, fingerprint)`},
		{"algorithm", "policies:\n  - {name: a, algorithm: Token_Bucket, limit: 1, per: 1s}\n",
			`policies[0].algorithm: unknown algorithm "Token_Bucket"; did you mean "token_bucket"? (want one of token_bucket, fixed_window, sliding_window, sliding_log, concurrency, quota)`},
		{"mode", "policies:\n  - {name: a, algorithm: token_bucket, limit: 1, per: 1s, mode: enforec}\n",
			`policies[0].mode: unknown mode "enforec"; did you mean "enforce"? (want one of enforce, shadow, off)`},
		{"period", "policies:\n  - {name: a, algorithm: quota, limit: 1, period: mnth}\n",
			`policies[0].period: unknown period "mnth"; did you mean "month"? (want one of fixed, day, month)`},
		{"store failure mode", "policies:\n  - {name: a, algorithm: token_bucket, limit: 1, per: 1s, on_store_error: opne}\n",
			`policies[0].on_store_error: unknown store failure mode "opne"; did you mean "open"? (want one of open, closed, local)`},
		{"far from every value", "policies:\n  - {name: a, algorithm: leaky, limit: 1, per: 1s}\n",
			`policies[0].algorithm: unknown algorithm "leaky" (want one of token_bucket, fixed_window, sliding_window, sliding_log, concurrency, quota)`},
		{"missing", "policies:\n  - {name: a, limit: 1, per: 1s}\n",
			`policies[0].algorithm: missing (want one of token_bucket, fixed_window, sliding_window, sliding_log, concurrency, quota)`},
		{"logging level", "policies:\n" + ok + "logging: {level: warnn}\n",
			`logging.level: unknown level "warnn"; did you mean "warn"? (want one of debug, info, warn, error)`},
		{"anonymous", "policies:\n" + ok + "identity: {anonymous: dney}\n",
			`identity.anonymous: unknown value "dney"; did you mean "deny"? (want one of allow, deny)`},
		{"quota status", "policies:\n" + ok + "http: {quota_status: 492}\n",
			`http.quota_status: unknown status 492; did you mean "429"? (want one of 403, 429)`},
		{"policy name in a plan", "policies:\n" + ok + "plans:\n  pro:\n    tenant-rmp: {limit: 20}\n",
			`plans.pro.tenant-rmp: no such policy "tenant-rmp"; did you mean "tenant-rpm"?`},
		{"default plan", "policies:\n" + ok + "plans:\n  pro:\n    tenant-rpm: {limit: 20}\ndefault_plan: por\n",
			`default_plan: no plan "por"; did you mean "pro"?`},
		{"tenant's plan", "policies:\n" + ok + "plans:\n  premium:\n    tenant-rpm: {limit: 20}\ntenants:\n  acme: {plan: premum}\n",
			`tenants.acme.plan: no plan "premum"; did you mean "premium"?`},
		{"no near plan", "policies:\n" + ok + "plans:\n  premium:\n    tenant-rpm: {limit: 20}\ntenants:\n  acme: {plan: gold}\n",
			"tenants.acme.plan: no plan \"gold\"\n"},
	}
	// A list of valid values in any other form: "[a b]", "a or b".
	otherList := regexp.MustCompile(`\[[a-z_]+ [a-z_]|want one of [^)]* or |is not [a-z]+, |[a-z_]+ or [a-z_]+\)`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := checkFile(t, tt.file)
			if code != 1 || out != "" {
				t.Fatalf("check = %d, stdout %q; want 1 and nothing", code, out)
			}
			if !strings.Contains(errs, tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, errs)
			}
			if m := otherList.FindString(errs); m != "" {
				t.Errorf("stderr writes a list another way (%q):\n%s", m, errs)
			}
		})
	}
}

func TestNearest(t *testing.T) {
	valid := []string{"tenant", "key_id", "token_bucket", "tokens", "to"}
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"tennant", "tenant", true},   // one insertion
		{"tenatn", "tenant", true},    // one transposition
		{"TENANT", "tenant", true},    // case
		{"keyid", "key_id", true},     // one deletion
		{"tokens", "tokens", true},    // exact
		{"token", "tokens", true},     // nearer to tokens than to token_bucket
		{"tk", "to", true},            // short: one edit allowed
		{"xy", "", false},             // two edits of a two-letter word
		{"bucket", "", false},         // another word
		{"", "", false},               // nothing given
		{"tenant_id", "tenant", true}, // three edits of nine letters
	}
	for _, tt := range tests {
		if got, ok := nearest(tt.in, valid); got != tt.want && tt.ok || ok != tt.ok {
			t.Errorf("nearest(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestEditDistance: fixed pairs, then the bounds every distance keeps on
// random strings: zero only for equal strings, symmetric, at least the
// difference of the lengths and at most the longer length.
func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"algorythm", "algorithm", 1}, {"tennant", "tenant", 1},
		{"enforec", "enforce", 1}, {"ca", "abc", 3}, {"kitten", "sitting", 3}, {"mnth", "month", 1},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tt.a, tt.b, got, tt.want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = "abc"[rng.IntN(3)]
		}
		return string(b)
	}
	for range 5000 {
		a, b := word(), word()
		d := editDistance(a, b)
		if d != editDistance(b, a) || (d == 0) != (a == b) || d < max(len(a), len(b))-min(len(a), len(b)) || d > max(len(a), len(b)) {
			t.Fatalf("editDistance(%q, %q) = %d, reversed %d", a, b, d, editDistance(b, a))
		}
	}
}

// TestCovers: which requests of a route an exempt path lets through.
func TestCovers(t *testing.T) {
	tests := []struct {
		exempt, route string
		all, some     bool
	}{
		{"/api/*", "/api/items", true, true},
		{"/api/*", "/api", true, true},
		{"/api/*", "/api/items/{id}", true, true},
		{"/api/*", "/apiv2/items", false, false},
		{"/api/*", "/v1/api/items", false, false},
		{"/api/*", "/{tenant}/items", false, true},
		{"/api/*", "/{path...}", false, true},
		{"/api/v1/*", "/api", false, false},
		{"/*", "/anything", true, true},
		{"/healthz", "/healthz", true, true},
		{"/healthz", "/healthz/deep", false, false},
		{"/healthz", "/{name}", false, true},
		{"/v1/special", "/v1/{id}", false, true},
		{"/v1/special", "/v1/{rest...}", false, true},
		{"/v1/special", "/v1/items", false, false},
		{"/v1", "/v1/{id}", false, false},
	}
	for _, tt := range tests {
		if all, some := covers(tt.exempt, tt.route); all != tt.all || some != tt.some {
			t.Errorf("covers(%q, %q) = %v, %v; want %v, %v", tt.exempt, tt.route, all, some, tt.all, tt.some)
		}
	}
}

// TestCheckWarnings: an exempt path over a route a policy limits, and a
// named unit one typo from a built-in one, are warnings on stderr with
// their positions; the file is still valid.
func TestCheckWarnings(t *testing.T) {
	const file = `policies:
  - {name: api-rpm, algorithm: token_bucket, limit: 10, per: 1m, match: {routes: [/api/items, "/api/items/{id}"], methods: [POST]}}
  - {name: per-item, algorithm: token_bucket, limit: 10, per: 1m, match: {routes: ["/v1/{id}"]}}
  - {name: everything, algorithm: token_bucket, limit: 10, per: 1m, unit: Tokenz}
http:
  exempt: [/healthz, /api/*, /v1/special]
`
	code, out, errs := checkFile(t, file, "-q")
	want := `F:4:75: policies[2].unit: warning: "Tokenz" is a named unit, which a request carries only when it names it; did you mean "tokens"?
F:6:22: http.exempt[1]: warning: "/api/*" exempts every request to /api/items, which policies[0] (api-rpm) limits: those requests are never limited
F:6:22: http.exempt[1]: warning: "/api/*" exempts every request to /api/items/{id}, which policies[0] (api-rpm) limits: those requests are never limited
F:6:30: http.exempt[2]: warning: "/v1/special" exempts some requests to /v1/{id}, which policies[1] (per-item) limits: those requests are never limited
`
	if code != 0 || out != "" || errs != want {
		t.Errorf("check -q = %d, stdout %q, stderr:\n%s\nwant 0, nothing and:\n%s", code, out, errs, want)
	}
	// The usual exempt paths, beside policies on every route or other
	// routes, and named units far from the built-in ones warn of nothing.
	code, _, errs = checkFile(t, "policies:\n  - {name: a, algorithm: token_bucket, limit: 1, per: 1s, match: {routes: [/v1/chat]}}\n  - {name: b, algorithm: token_bucket, limit: 1, per: 1s, unit: images}\n")
	if code != 0 || errs != "" {
		t.Errorf("check with the default exempt paths = %d, stderr %q; want 0 and nothing", code, errs)
	}
}

// FuzzExplain: rewording never fails on any message, leaves messages of
// other shapes alone, and a reworded one keeps the value it quoted.
func FuzzExplain(f *testing.F) {
	for _, s := range []string{
		`unknown key "algorythm" (want one of name, algorithm)`,
		`unknown algorithm "x" (want one of token_bucket, quota)`,
		`unknown level "warnn" (want one of debug, info, warn, error)`,
		`missing (want one of a, b, c)`,
		`unknown status 492 (want one of 403, 429)`,
		`no such policy "p"`, `no plan ""`, `must be > 0, got 0`, `"x" is not a path`,
	} {
		f.Add(s)
	}
	names := fileNames{policies: []string{"tenant-rpm", "p"}, plans: []string{"pro"}}
	quoted := regexp.MustCompile(`"[^"]*"`)
	f.Fuzz(func(t *testing.T, msg string) {
		got := explain(msg, names)
		if got == msg {
			return
		}
		if !strings.Contains(got, "(want one of ") && !strings.Contains(got, "; did you mean ") {
			t.Fatalf("explain(%q) = %q: reworded without a list or a suggestion", msg, got)
		}
		if q := quoted.FindString(msg); q != "" && !strings.Contains(got, q) {
			t.Fatalf("explain(%q) = %q: lost %s", msg, got, q)
		}
	})
}

// TestCheckParsesOnce: check reads a policy file's YAML once, for the
// decoding and the warnings' positions alike: loading it allocates about
// what config.Parse alone does (a second parse of the YAML tree adds
// about half as much again).
func TestCheckParsesOnce(t *testing.T) {
	var b strings.Builder
	b.WriteString("policies:\n  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 60, per: 1m}\nidentity: {anonymous: deny}\n")
	b.WriteString("http: {exempt: [/healthz]}\ndefault_plan: basic\nplans:\n  basic: {rpm: {limit: 10}}\ntenants:\n")
	for i := range 500 {
		fmt.Fprintf(&b, "  t%04d: {api_keys: [%s]}\n", i, apikey.Sum(fmt.Sprintf("sk-t%04d", i)))
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := testing.AllocsPerRun(3, func() {
		data, err := os.ReadFile(path)
		if err == nil {
			_, err = config.Parse(path, data)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	load := testing.AllocsPerRun(3, func() {
		if _, raw, ok := loadPolicyFile(io.Discard, path); !ok || raw.root == nil {
			t.Fatal("the file does not load, or without its tree")
		}
	})
	t.Logf("allocations: config.Parse %.0f, loadPolicyFile %.0f", parse, load)
	if load > 1.1*parse {
		t.Errorf("loadPolicyFile allocates %.0f times; want at most 1.1 × config.Parse's %.0f (one parse)", load, parse)
	}
}

// TestCheckQueuesPerReplica: a policy that queues on a shared store is
// reported with its queue per replica and the fleet-wide figure; a
// policy in memory or without a queue is not.
func TestCheckQueuesPerReplica(t *testing.T) {
	const file = "policies:\n" +
		"  - {name: shared, algorithm: concurrency, limit: 2, store: redis, queue: {size: 5, timeout: 1s}}\n" +
		"  - {name: counted, algorithm: token_bucket, limit: 10, per: 1s, store: redis, on_store_error: local, replicas: 3, queue: {size: 4, timeout: 1s}}\n" +
		"  - {name: local, algorithm: concurrency, limit: 2, queue: {size: 7, timeout: 1s}}\n" +
		"  - {name: unqueued, algorithm: token_bucket, limit: 10, per: 1s, store: redis}\n"
	code, out, errs := checkFile(t, file)
	if code != 0 {
		t.Fatalf("check exited %d:\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		`queues: shared on store "redis": its limit is fleet-wide, its queue per replica: up to 5 waiters per replica (n × 5 across n replicas)`,
		`queues: counted on store "redis": its limit is fleet-wide, its queue per replica: up to 4 waiters per replica (12 across its 3 replicas)`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "queues: "); n != 2 {
		t.Errorf("%d queue lines; want 2 (none for a policy in memory or without a queue):\n%s", n, out)
	}
}
