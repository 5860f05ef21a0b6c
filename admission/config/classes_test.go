package config_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/limits"
)

// classesFile has every source of a class: plans, a key's entry, a route,
// a header for one key, the default; and shares on a global concurrency
// cap, a global rate and an upstream policy.
const classesFile = `version: 1
stores:
  openai: {kind: upstream}
classes:
  priorities: {interactive: 10, batch: 1, bulk: 0}
  default: interactive
  plans: {free: batch}
  routes: {/v1/embeddings: bulk}
  from_header: {name: x-priority, values: {low: batch, high: interactive}, keys: [ci]}
default_plan: pro
plans:
  free: {}
  pro: {}
tenants:
  acme:
    api_keys:
      - {hash: "sha256:a4a6d307ad00fa67176e1099fdbc4f4a09bb527a7f24718a5030f2f173d11f7f", id: ci}
      - {hash: "sha256:18519d64d0d18b0e84e43301547425933dc0394576666e8da1ef1790fb64ca9f", id: nightly, class: batch}
  hobby: {plan: free}
policies:
  - name: upstream
    algorithm: concurrency
    limit: 64
    queue: {size: 100, timeout: 30s, shares: [{class: interactive, percent: 70}, {class: batch, percent: 30}]}
  - name: rpm
    algorithm: token_bucket
    limit: 600
    per: 1m
    queue: {size: 100, shares: [{class: batch, percent: 20}]}
  - name: provider-tpm
    store: openai
    key: [model]
    unit: tokens
    algorithm: token_bucket
    limit: 2M
    per: 1m
    queue: {size: 1000, timeout: 30s, shares: [{class: interactive, percent: 70}]}
`

// The shares of every kind of shared policy name classes and become
// priorities.
func TestClassShares(t *testing.T) {
	f, err := config.Parse("classes.yaml", []byte(classesFile))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]limits.Share{
		{{Priority: 10, Percent: 70}, {Priority: 1, Percent: 30}},
		{{Priority: 1, Percent: 20}},
		{{Priority: 10, Percent: 70}},
	}
	for i, w := range want {
		if got := f.Config.Policies[i].Queue.Shares; !slices.Equal(got, w) {
			t.Errorf("policies[%d].queue.shares = %v; want %v", i, got, w)
		}
	}
	if f.Classes.FromHeader.Name != "X-Priority" {
		t.Errorf("from_header.name = %q; want the canonical X-Priority", f.Classes.FromHeader.Name)
	}
}

// A request's class comes from the first source that applies: the
// header for a listed key, the key's entry, the route, the plan, the
// default; a header sent by any other key, an unmapped value or a
// repeated header changes nothing.
func TestPriority(t *testing.T) {
	f, err := config.Parse("classes.yaml", []byte(classesFile))
	if err != nil {
		t.Fatal(err)
	}
	const chat, embed = "POST /v1/chat/completions", "POST /v1/embeddings"
	tests := []struct {
		name, tenant, key, op string
		header                http.Header
		want                  int
	}{
		{"default plan, default class", "acme", "ci", chat, nil, 10},
		{"listed key picks low", "acme", "ci", chat, http.Header{"X-Priority": {"low"}}, 1},
		{"listed key, spaces trimmed", "acme", "ci", embed, http.Header{"X-Priority": {" high "}}, 10},
		{"listed key, unmapped value", "acme", "ci", chat, http.Header{"X-Priority": {"urgent"}}, 10},
		{"listed key, value case matters", "acme", "ci", chat, http.Header{"X-Priority": {"LOW"}}, 10},
		{"listed key, repeated header", "acme", "ci", chat, http.Header{"X-Priority": {"low", "low"}}, 10},
		{"key entry", "acme", "nightly", chat, nil, 1},
		{"key entry, header not believed", "acme", "nightly", chat, http.Header{"X-Priority": {"high"}}, 1},
		{"key entry beats the route", "acme", "nightly", embed, nil, 1},
		{"route", "acme", "ci", embed, nil, 0},
		{"plan", "hobby", "key_x", chat, nil, 1},
		{"plan, header not believed", "hobby", "key_x", chat, http.Header{"X-Priority": {"high"}}, 1},
		{"route beats the plan", "hobby", "key_x", embed, nil, 0},
		{"unknown tenant takes the default plan", "stranger", "", chat, nil, 10},
		{"no operation", "hobby", "", "", nil, 1},
	}
	for _, tc := range tests {
		var header func(string) []string
		if tc.header != nil {
			header = tc.header.Values
		}
		if got := f.Priority(tc.tenant, tc.key, tc.op, header); got != tc.want {
			t.Errorf("%s: Priority(%q, %q, %q, %v) = %d; want %d", tc.name, tc.tenant, tc.key, tc.op, tc.header, got, tc.want)
		}
	}
	plain, err := config.Parse("plain.yaml", []byte("policies: [{name: rpm, algorithm: token_bucket, limit: 1, per: 1s}]"))
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Priority("acme", "ci", chat, http.Header{"X-Priority": {"high"}}.Values); got != 0 {
		t.Errorf("without classes: Priority = %d; want 0", got)
	}
}

// Resolving a class allocates nothing: it runs on every request.
func TestPriorityAllocs(t *testing.T) {
	f, err := config.Parse("classes.yaml", []byte(classesFile))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Priority": {"low"}}
	if n := testing.AllocsPerRun(100, func() { f.Priority("acme", "ci", "POST /v1/embeddings", h.Values) }); n != 0 {
		t.Errorf("Priority allocates %v times; want 0", n)
	}
}

// FuzzPriority: whatever tenant, key, operation and header a request
// brings, its priority is one the file declares (or 0), and a header only
// counts for the listed key.
func FuzzPriority(f *testing.F) {
	file, err := config.Parse("classes.yaml", []byte(classesFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("acme", "ci", "POST /v1/embeddings", "low")
	f.Add("hobby", "key_x", "GET /v1/models/{id}", " high\t")
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, tenant, key, op, value string) {
		h := http.Header{"X-Priority": {value}}
		got := file.Priority(tenant, key, op, h.Values)
		if got != 0 && got != 1 && got != 10 {
			t.Fatalf("Priority(%q, %q, %q, %q) = %d: not a declared class", tenant, key, op, value, got)
		}
		if key != "ci" && got != file.Priority(tenant, key, op, nil) {
			t.Fatalf("Priority(%q, %q, %q, %q) = %d: the header of a key not listed counted", tenant, key, op, value, got)
		}
	})
}
