package gateway

import (
	"bufio"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/weights"
)

// TestPriceMessageBatch: a message batch's creation body is checked
// whole before anything is admitted, and its reservation is the sum of
// its requests' prompts and max_tokens (capped by MaxOutputReserve).
func TestPriceMessageBatch(t *testing.T) {
	est, err := weights.NewEstimator(weights.Config{Counters: weights.BPECounter})
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{est: est, cfg: Config{MaxOutputReserve: 1000}}
	req := func(id, model string, maxTokens int, extra string) string {
		return `{"custom_id":"` + id + `","params":{"model":"` + model + `","max_tokens":` + strconv.Itoa(maxTokens) + `,"messages":[{"role":"user","content":"Hello there"}]` + extra + `}}`
	}
	many := func(n int) string {
		var b []string
		for i := range n {
			b = append(b, req("r"+strconv.Itoa(i), "claude-sonnet-4-5", 1, ""))
		}
		return strings.Join(b, ",")
	}
	good := `{"requests":[` + req("a", "claude-sonnet-4-5", 100, "") + `,` + req("b", "claude-sonnet-4-5", 5000, "") + `]}`
	sum, err := g.priceMessageBatch([]byte(good), 10)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := est.EstimateEndpoint(weights.EndpointMessages, []byte(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"Hello there"}]}`))
	if sum.model != "claude-sonnet-4-5" || sum.in != 2*one.InputTokens || sum.out != 100+1000 {
		t.Errorf("sum %+v; want 2×%d in, 100 + 1000 (capped) out", sum, one.InputTokens)
	}
	for _, tt := range []struct{ name, body, want string }{
		{"not an object", `[1]`, "not a JSON object"},
		{"an unknown key", `{"requests":[],"x":1}`, "unknown key"},
		{"a key twice", `{"requests":[],"requests":[]}`, ""},
		{"requests not an array", `{"requests":{}}`, "must be an array"},
		{"no request", `{"requests":[]}`, "at least one"},
		{"too many", `{"requests":[` + many(11) + `]}`, "more than 10"},
		{"a bad custom_id", `{"requests":[` + req("a b", "claude-sonnet-4-5", 1, "") + `]}`, "custom_id"},
		{"a long custom_id", `{"requests":[` + req(strings.Repeat("a", 65), "claude-sonnet-4-5", 1, "") + `]}`, "custom_id"},
		{"a custom_id twice", `{"requests":[` + req("a", "claude-sonnet-4-5", 1, "") + `,` + req("a", "claude-sonnet-4-5", 1, "") + `]}`, "not unique"},
		{"params not an object", `{"requests":[{"custom_id":"a","params":[]}]}`, "params must be"},
		{"a request's unknown key", `{"requests":[{"custom_id":"a","params":{},"x":1}]}`, "unknown key"},
		{"a stream", `{"requests":[` + req("a", "claude-sonnet-4-5", 1, `,"stream":true`) + `]}`, "cannot stream"},
		{"two models", `{"requests":[` + req("a", "claude-sonnet-4-5", 1, "") + `,` + req("b", "claude-haiku-4-5", 1, "") + `]}`, "one batch per model"},
		{"no model", `{"requests":[{"custom_id":"a","params":{"max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}}]}`, "model"},
		{"invalid JSON", `{"requests":[` + req("a", "claude-sonnet-4-5", 1, "") + `,{]}`, ""},
	} {
		_, err := g.priceMessageBatch([]byte(tt.body), 10)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error naming %q", tt.name, err, tt.want)
		}
	}
}

// TestMessageResults: the results of a message batch add up to the usage
// of its succeeded requests; one whose usage cannot be read makes the
// whole batch charged as reserved, and a line longer than the bound is
// an error (read again later), never a partial sum.
func TestMessageResults(t *testing.T) {
	lines := []string{
		`{"custom_id":"a","result":{"type":"succeeded","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":2,"output_tokens":7}}}}`,
		`{"custom_id":"b","result":{"type":"succeeded","message":{"usage":{"input_tokens":3,"output_tokens":4}}}}`,
		`{"custom_id":"c","result":{"type":"errored","error":{}}}`,
		`{"custom_id":"d","result":{"type":"canceled"}}`,
	}
	var m messageResults
	for _, l := range lines {
		m.add([]byte(l))
	}
	rep := m.report()
	if m.succeeded != 2 || m.errored != 1 || m.canceled != 1 || rep.Usage.InputTokens != 20 || rep.Usage.OutputTokens != 11 ||
		rep.Usage.CachedInputTokens != 2 || rep.Usage.CacheWriteInputTokens != 5 || m.outcome() != "completed" {
		t.Errorf("results %+v, usage %+v; want 2 succeeded of 20 in (2 read, 5 written) and 11 out", m, rep.Usage)
	}
	for _, bad := range []string{
		`{"custom_id":"e","result":{"type":"succeeded","message":{"usage":{"input_tokens":-1,"output_tokens":4}}}}`,
		`{"custom_id":"e","result":{"type":"succeeded","message":{}}}`,
		`{"custom_id":"e","result":{"type":"mystery"}}`,
		`not json`,
	} {
		var m messageResults
		m.add([]byte(bad))
		if rep := m.report(); m.unreadable != 1 || rep.Input == weights.FallbackNone || m.outcome() != "completed" {
			t.Errorf("%s: %+v; want unreadable, charged as reserved", bad, m)
		}
	}
	var none messageResults
	none.add([]byte(lines[3]))
	if none.outcome() != "cancelled" {
		t.Errorf("all canceled: %s; want cancelled", none.outcome())
	}
	br := bufio.NewReaderSize(strings.NewReader("short\n"+strings.Repeat("x", 100)+"\nend"), 16)
	if l, err := readLine(br, 50); err != nil || string(l) != "short" {
		t.Errorf("readLine: %q, %v; want short", l, err)
	}
	if _, err := readLine(br, 50); err == nil {
		t.Error("a line of 100 bytes read with a bound of 50")
	}
}
