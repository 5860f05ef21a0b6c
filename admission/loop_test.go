package admission_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/fingerprint"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
)

// loopPolicy allows 5 near-identical steps of a session in any 2 minutes
// (a sliding log: exact), in at most maxPartitions partitions.
func loopPolicy(mode limits.Mode, maxPartitions int) admission.Policy {
	return admission.Policy{Name: "loops", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint},
		Algorithm: limits.SlidingLog, Limit: 5, Per: 2 * time.Minute, Mode: mode,
		MaxPartitions: maxPartitions, Overflow: limits.OverflowEvict}
}

// agent builds the growing chat-completions body of a simulated agent:
// each step appends the assistant's tool call (with a fresh call id, and
// arguments written with varying key order and spacing) and the tool's
// result.
type agent struct {
	msgs []string
	n    int
}

func newAgent() *agent {
	return &agent{msgs: []string{`{"role":"system","content":"You are a coding agent."}`, `{"role":"user","content":"Fix the failing test."}`}}
}

// step appends a call of tool with args (a JSON object) and its result,
// and returns the request body the agent sends next.
func (a *agent) step(tool, args, result string) []byte {
	a.n++
	sp := strings.Repeat(" ", a.n%3) // the model's spacing varies
	a.msgs = append(a.msgs,
		fmt.Sprintf(`{"role":"assistant","content":"Step %d: let me look.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":%q,"arguments":%q}}]}`,
			a.n, a.n, tool, sp+args+sp),
		fmt.Sprintf(`{"role":"tool","tool_call_id":"call_%d","content":%q}`, a.n, result))
	return []byte(`{"model":"gpt-4o","messages":[` + strings.Join(a.msgs, ",") + `]}`)
}

// loopTrace runs steps through a loop policy in mode, one session, the
// clock advancing by each step's gap, and returns the 1-based indices of
// the steps refused (enforce) or would-be-refused (shadow).
func loopTrace(t *testing.T, mode limits.Mode, steps []traceStep) []int {
	t.Helper()
	clock := admissiontest.NewClock(backendtest.Epoch)
	rec := &recorder{}
	c := newController(t, clock, rec, loopPolicy(mode, 0))
	a := newAgent()
	var caught []int
	for i, s := range steps {
		clock.Advance(s.gap)
		fp, tool, ok := fingerprint.Chat(a.step(s.tool, s.args, s.result))
		if !ok || tool != s.tool {
			t.Fatalf("step %d: Chat = %v, %q, %v; want a fingerprint of tool %q", i+1, fp, tool, ok, s.tool)
		}
		rec.mu.Lock()
		before := len(rec.decisions)
		rec.mu.Unlock()
		tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "acme", Session: "run-1", Fingerprint: fp, Operation: "POST /v1/chat/completions"})
		var rej *admission.Rejection
		switch {
		case err == nil:
			tk.Done()
		case errors.As(err, &rej) && rej.Reason == admission.ReasonLoop && rej.Policy == "loops":
			caught = append(caught, i+1)
			continue
		default:
			t.Fatalf("step %d: %v", i+1, err)
		}
		rec.mu.Lock()
		ds := rec.decisions[before:]
		rec.mu.Unlock()
		for _, d := range ds {
			if d.Outcome == admission.WouldReject {
				if d.Reason != admission.ReasonLoop {
					t.Errorf("step %d: would_reject with reason %v; want loop", i+1, d.Reason)
				}
				caught = append(caught, i+1)
			}
		}
	}
	return caught
}

type traceStep struct {
	gap                time.Duration
	tool, args, result string
}

// soundTrace is a realistic agent run that does not loop: 300 steps 5 s
// apart across five tools, the same tool again and again with other
// arguments (files, searches), the test suite re-run after each edit
// (same call, a result that changed), and a build polled with the same
// call and the same answer every 40 s (three times in any 2 minutes).
func soundTrace() []traceStep {
	var steps []traceStep
	for i := range 300 {
		s := traceStep{gap: 5 * time.Second}
		switch {
		case i%8 == 7:
			s.tool, s.args, s.result = "build_status", `{"build": 42}`, `{"state":"running"}`
		case i%6 == 0:
			s.tool, s.args, s.result = "run_tests", `{"package":"./..."}`, fmt.Sprintf("%d passed, %d failed", 100+i/6, 30-i/12)
		case i%3 == 0:
			s.tool, s.args, s.result = "edit_file", fmt.Sprintf(`{"path":"pkg/f%d.go","line":%d}`, i%40, i), "ok"
		case i%2 == 0:
			s.tool, s.args, s.result = "read_file", fmt.Sprintf(`{"path":"pkg/f%d.go"}`, i), fmt.Sprintf("package pkg // %d", i)
		default:
			s.tool, s.args, s.result = "search", fmt.Sprintf(`{"query":"symbol%d","limit":10}`, i), fmt.Sprintf("%d matches", i%7)
		}
		steps = append(steps, s)
	}
	return steps
}

// TestLoopFigures measures the loop policy (5 near-identical steps per 2
// minutes) on a sound trace (no refusal) and on one that starts looping
// at step k (caught at step k+5: the 6th identical step), in shadow and
// in enforce. The looping steps differ in call ids, spacing, key order
// and case, which the fingerprint normalises away.
func TestLoopFigures(t *testing.T) {
	for _, mode := range []limits.Mode{limits.Shadow, limits.Enforce} {
		if got := loopTrace(t, mode, soundTrace()); len(got) != 0 {
			t.Errorf("%v: sound trace of 300 steps: refused at steps %v; want none", mode, got)
		}
		const k = 40
		steps := soundTrace()[:k-1]
		for i := range 20 {
			args := []string{`{"path":"pkg/a.go","line":7}`, `{"line":7,"path":"pkg/a.go"}`, `{"line": 7.0, "path": "PKG/a.go "}`}[i%3]
			steps = append(steps, traceStep{5 * time.Second, "edit_file", args, "Error: line 7 is not in the file"})
		}
		got := loopTrace(t, mode, steps)
		t.Logf("%v: sound trace: 0 of 300 steps refused; loop from step %d: caught at steps %v", mode, k, got)
		if len(got) == 0 || got[0] != k+5 {
			t.Errorf("%v: loop from step %d: caught at %v; want first at step %d", mode, k, got, k+5)
		}
		if len(got) != 20-5 {
			t.Errorf("%v: %d of the 20 looping steps refused; want every one past the 5th (15)", mode, len(got))
		}
	}
}

// TestLoopFlood: invented fingerprints (a session sending 10,000 steps
// that never repeat) are all admitted, fill only the loop policy's own
// table, within its max_partitions (100), by evicting partitions; a loop
// that follows is caught at its 6th step. (A flood interleaved with a
// loop can evict the loop's count: detection is then delayed, never a
// sound step refused; docs/sessions.md says so.)
func TestLoopFlood(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	c := newController(t, clock, nil, loopPolicy(limits.Enforce, 100))
	ctx := context.Background()
	try := func(session string, fp limits.Fingerprint) error {
		tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "acme", Session: session, Fingerprint: fp})
		if err == nil {
			tk.Done()
		}
		return err
	}
	for i := range 10_000 {
		if err := try("flood", fingerprint.ToolCall("search", fmt.Appendf(nil, `{"q":%d}`, i))); err != nil {
			t.Fatalf("invented step %d refused: %v", i, err)
		}
	}
	for _, s := range c.Stats() {
		if s.Partitions > 100 || s.Evicted == 0 {
			t.Errorf("%s after 10,000 invented steps: %d partitions, %d evicted; want at most max_partitions (100), by eviction", s.Name, s.Partitions, s.Evicted)
		}
	}
	loop := fingerprint.ToolCall("edit_file", []byte(`{"path":"a.go"}`))
	for i := range 6 {
		err := try("real", loop)
		var rej *admission.Rejection
		switch {
		case i < 5 && err != nil:
			t.Fatalf("loop step %d refused early: %v", i+1, err)
		case i == 5 && (!errors.As(err, &rej) || rej.Reason != admission.ReasonLoop):
			t.Errorf("6th identical step after a flood: %v; want a loop refusal", err)
		}
	}
}

// TestLoopDecisionLog: in shadow, the 6th identical step is served and
// the decision log's line carries the evidence: the policy, would_reject
// with the reason loop, the count allowed, the window and the session.
func TestLoopDecisionLog(t *testing.T) {
	var buf bytes.Buffer
	clock := admissiontest.NewClock(backendtest.Epoch)
	log, err := shadow.NewLog(shadow.LogConfig{}, shadow.WithClock(clock), shadow.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	c := newController(t, clock, log, loopPolicy(limits.Shadow, 0))
	fp := fingerprint.ToolCall("get_weather", []byte(`{"city":"Paris"}`))
	for i := range 6 {
		tk, err := c.TryAdmit(context.Background(), admission.Request{Tenant: "acme", Session: "run-1", Fingerprint: fp})
		if err != nil {
			t.Fatalf("step %d in shadow: %v; want served", i+1, err)
		}
		tk.Done()
	}
	want := []string{`"policy":"loops"`, `"decision":"would_reject"`, `"reason":"loop"`, `"limit":5`, `"window_s":120`, `"session":"run-1"`}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("decision log = %q; want one line, the 6th step's", buf.String())
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("decision log line %s; want %s", lines[0], w)
		}
	}
}
