package rlsconfig_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestParseErrors: decoding is strict, and every problem of a file is
// reported at once with the file, the domain and the path.
func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"empty", "", []string{"test.yaml: empty: no domain"}},
		{"unknown key", "domain: a\ndescriptors:\n  - key: k\n    rate_limt: {unit: second, requests_per_unit: 1}\n",
			[]string{"test.yaml: yaml: unmarshal errors:", "field rate_limt not found"}},
		{"duplicate key", "domain: a\ndomain: b\n", []string{"already defined"}},
		{"no domain", "descriptors: []\n", []string{"domain: must not be empty"}},
		{"domain twice", "domain: a\n---\ndomain: a\n", []string{`domain: "a" is declared twice`}},
		{"no key and duplicates", `
domain: a
descriptors:
  - value: v
  - {key: k, value: v}
  - {key: k, value: v}
  - {key: k}
  - {key: k}
  - {key: k, value: "p*"}
  - {key: k, value: "p*"}
`, []string{
			`domain "a": descriptors[0].key: must not be empty`,
			`descriptors[2]: duplicate descriptor k=v`,
			`descriptors[4]: duplicate descriptor k`,
			`descriptors[6]: duplicate descriptor k=p*`,
		}},
		{"rate limits", `
domain: a
descriptors:
  - {key: a, rate_limit: {unit: minutes, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: second}}
  - {key: c, rate_limit: {unit: second, requests_per_unit: -1}}
  - {key: d, rate_limit: {unit: second, requests_per_unit: 5000000000}}
  - {key: e, rate_limit: {unlimited: true, unit: second}}
  - {key: f, rate_limit: {unit: second, requests_per_unit: 1, counts: dollars}}
  - {key: g, rate_limit: {unit: second, requests_per_unit: 1, algorithm: concurrency}}
  - {key: h, rate_limit: {unit: second, requests_per_unit: 1, algorithm: quota}}
  - {key: i, rate_limit: {unit: second, requests_per_unit: 1, queue: {timeout: 1s}}}
  - {key: j, rate_limit: {unit: second, requests_per_unit: 1, burst: 5}}
  - {key: k, rate_limit: {unit: second, requests_per_unit: 1, on_store_error: maybe}}
`, []string{
			`descriptors[0].rate_limit.unit: must be second, minute, hour, day or week, got "minutes"`,
			`descriptors[1].rate_limit.requests_per_unit: is required (or unlimited: true)`,
			`descriptors[2].rate_limit.requests_per_unit: must be in [0, 4294967295], got -1`,
			`descriptors[3].rate_limit.requests_per_unit: must be in [0, 4294967295], got 5000000000`,
			`descriptors[4].rate_limit.unlimited: an unlimited rate_limit takes no unit`,
			`descriptors[5].rate_limit.counts: must be hits, tokens or cost, got "dollars"`,
			`descriptors[6].rate_limit.algorithm: concurrency cannot be served over the rate limit protocol`,
			`descriptors[7].rate_limit.algorithm: quota cannot be served`,
			`descriptors[8].rate_limit.queue.timeout: set without a queue`,
			`descriptors[9].rate_limit.burst: only a token_bucket has a burst`,
			`descriptors[10].rate_limit.on_store_error`,
		}},
		{"names and replaces", `
domain: a
unknown: maybe
descriptors:
  - {key: a, rate_limit: {name: x, unit: second, requests_per_unit: 1}}
  - {key: b, rate_limit: {name: x, unit: second, requests_per_unit: 1}}
  - {key: c, rate_limit: {replaces: [{name: nobody}], unit: second, requests_per_unit: 1}}
  - {key: d, rate_limit: {name: d, replaces: [{name: d}, {}], unit: second, requests_per_unit: 1}}
`, []string{
			`unknown: must be ok or over_limit, got "maybe"`,
			`descriptors[1].rate_limit.name: "x" already names the limit at descriptors[0].rate_limit`,
			`descriptors[2].rate_limit.replaces[0]: replaces "nobody", which no rate_limit is named`,
			`descriptors[3].rate_limit.replaces[0].name: a limit cannot replace itself`,
			`descriptors[3].rate_limit.replaces[1].name: must not be empty`,
		}},
		{"sluice extensions", `
domain: a
descriptors:
  - key: sluice.phase
  - key: t
    value: fixed
    shared: true
  - key: t
    tenant: true
    descriptors:
      - key: u
        tenant: true
`, []string{
			`descriptors[0].key: keys starting with "sluice." are reserved`,
			`descriptors[1].shared: only a descriptor matching any value`,
			`descriptors[2].descriptors[0].tenant: a descriptor path has one tenant entry at most`,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := rlsconfig.Parse("test.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("Parse = nil error; want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error\n%v\ndoes not contain %q", err, w)
				}
			}
			if n, want := strings.Count(err.Error(), "\n")+1, len(c.want); !strings.Contains(err.Error(), "yaml:") && n != want {
				t.Errorf("Parse reported %d problems; want %d:\n%v", n, want, err)
			}
		})
	}
}

// TestParseDepth: nesting is bounded.
func TestParseDepth(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: deep\ndescriptors:\n")
	indent := ""
	for range rlsconfig.MaxDepth + 1 {
		b.WriteString(indent + "  - key: k\n" + indent + "    descriptors:\n")
		indent += "    "
	}
	b.WriteString(indent + "  - key: last\n")
	_, err := rlsconfig.Parse("deep.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "deeper than 16 levels") {
		t.Fatalf("Parse(17 levels) = %v; want a depth error", err)
	}
}

// FuzzParse: no input makes the parser panic, and what it accepts
// compiles into valid policies.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"domain: a\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 3}}\n",
		"domain: a\nalgorithm: token_bucket\ndescriptors:\n  - {key: k, value: \"v*\", shared: true, tenant: true, rate_limit: {unit: day, requests_per_unit: 0}}\n",
		"domain: a\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true}, descriptors: [{key: j, rate_limit: {name: n, replaces: [{name: n}], unit: week, requests_per_unit: 1}}]}\n---\ndomain: b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := rlsconfig.Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for i := range cfg.Policies {
			if err := cfg.Policies[i].Validate("p"); err != nil {
				t.Fatalf("accepted a file whose policy does not validate: %v", err)
			}
		}
	})
}

// TestParseAliasBomb: nested aliases that would expand a small file
// without end are refused, not expanded.
func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: bomb\nanchors: [&a0 {key: x}")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, ", &a%d {key: x, descriptors: [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]}")
	}
	b.WriteString("]\ndescriptors: [*a9]\n")
	_, err := rlsconfig.Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Fatalf("Parse(alias bomb) = %v; want an excessive aliasing error", err)
	}
}

// TestPartitionEscapes: values carrying the key separator cannot make two
// descriptors share a partition.
func TestPartitionEscapes(t *testing.T) {
	cfg, err := rlsconfig.Parse("p.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for _, c := range [][2]string{
		{"x\x1fy", "z"}, {"x", "y\x1fz"}, {"x\x1e", "\x1fz"}, {"x\x1e\x1f", "z"}, {"x", "\x1e\x1fz"}, {"x\x1e_", "z"}, {"x", "yz"},
	} {
		entries := []rlsconfig.Entry{{Key: "a", Value: c[0]}, {Key: "b", Value: c[1]}}
		l, ok := cfg.Domain("d").Match(entries)
		if !ok || l == nil {
			t.Fatalf("Match(%q) found no limit", c)
		}
		k := l.Partition(entries)
		if prev, dup := seen[k]; dup {
			t.Fatalf("Partition(%q) = Partition(%q) = %q", c, prev, k)
		}
		seen[k] = c[:]
	}
}

// TestDefaultStore: DefaultStore puts the limits of every domain whose
// file names no store in that store; a file naming one keeps it, memory
// included. The generated policies evict, when full, rather than share
// an overflow partition, and take the domain's max_partitions.
func TestDefaultStore(t *testing.T) {
	const yaml = `
domain: plain
descriptors:
  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}
---
domain: local
store: memory
max_partitions: 500
descriptors:
  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}
`
	for _, c := range []struct {
		opts []rlsconfig.Option
		want map[string]string
	}{
		{nil, map[string]string{"plain/k": "", "local/k": "memory"}},
		{[]rlsconfig.Option{rlsconfig.DefaultStore("redis")}, map[string]string{"plain/k": "redis", "local/k": "memory"}},
	} {
		cfg, err := rlsconfig.Parse("test.yaml", []byte(yaml), c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range cfg.Policies {
			if p.Store != c.want[p.Name] {
				t.Errorf("with %d options: policy %s in store %q; want %q", len(c.opts), p.Name, p.Store, c.want[p.Name])
			}
			if p.Overflow != limits.OverflowEvict {
				t.Errorf("policy %s: overflow %v; want evict", p.Name, p.Overflow)
			}
			if want := map[string]int{"plain/k": 0, "local/k": 500}[p.Name]; p.MaxPartitions != want {
				t.Errorf("policy %s: max partitions %d; want %d", p.Name, p.MaxPartitions, want)
			}
		}
	}
}
