package vclock_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vclock"
)

func TestSetRunsDueFunctionsInOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := vclock.New(t0)
	var ran []string
	c.AfterFunc(2*time.Second, func() { ran = append(ran, "b@"+c.Now().Sub(t0).String()) })
	c.AfterFunc(time.Second, func() { ran = append(ran, "a@"+c.Now().Sub(t0).String()) })
	stop := c.AfterFunc(time.Second, func() { ran = append(ran, "stopped") })
	if !stop.Stop() {
		t.Fatal("Stop of a pending function = false")
	}
	c.Advance(1500 * time.Millisecond)
	if got := strings.Join(ran, " "); got != "a@1s" || c.Pending() != 1 {
		t.Fatalf("after 1.5s: ran %q, %d pending; want \"a@1s\", 1", got, c.Pending())
	}
	c.Set(t0) // never backwards
	if !c.Now().Equal(t0.Add(1500 * time.Millisecond)) {
		t.Fatalf("Set to an earlier time moved the clock to %v", c.Now())
	}
	c.Advance(time.Hour)
	if got := strings.Join(ran, " "); got != "a@1s b@2s" || c.Pending() != 0 {
		t.Fatalf("after an hour: ran %q, %d pending; want \"a@1s b@2s\", 0", got, c.Pending())
	}
}

// Step runs one due function at a time, in due order (ties in the order
// scheduled), each seeing the clock at its due time, and moves the clock
// when none is due.
func TestStep(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := vclock.New(t0)
	var ran []string
	at := func(name string) func() { return func() { ran = append(ran, name+"@"+c.Now().Sub(t0).String()) } }
	c.AfterFunc(2*time.Second, at("b"))
	c.AfterFunc(time.Second, at("a1"))
	c.AfterFunc(time.Second, at("a2"))
	for i, want := range []string{"a1@1s", "a1@1s a2@1s", "a1@1s a2@1s b@2s"} {
		if !c.Step(t0.Add(time.Hour)) || strings.Join(ran, " ") != want {
			t.Fatalf("step %d: ran %q, want %q", i, ran, want)
		}
	}
	if c.Step(t0.Add(3*time.Second)) || !c.Now().Equal(t0.Add(3*time.Second)) {
		t.Fatalf("a step with nothing due ran something or left the clock at %v", c.Now())
	}
	c.AfterFunc(time.Second, at("late"))
	if c.Step(t0.Add(3500*time.Millisecond)) || !c.Now().Equal(t0.Add(3500*time.Millisecond)) || len(ran) != 3 {
		t.Fatalf("a function due after the bound ran, or the clock is at %v", c.Now())
	}
}

// TestBinariesLinkNoTestKit keeps the test kit (package testing, through
// admissiontest) out of the programs: the replay engine runs on this
// clock, not on admissiontest's.
func TestBinariesLinkNoTestKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../examples/llmproxy", "../../examples/claims", "../../cmd/admitctl").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasSuffix(p, "/admissiontest") {
			t.Errorf("a program links %s", p)
		}
	}
}
