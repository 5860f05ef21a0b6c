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
