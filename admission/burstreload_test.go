package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestLoweredBurstHoldsAtOnce lowers a token bucket's burst by a reload
// and decides a request at the very instant of the partition's last
// decision: the bucket holds no more than the burst in force, so a
// request above it is refused, and Remaining reads no more than it.
func TestLoweredBurstHoldsAtOnce(t *testing.T) {
	clock := admissiontest.NewClock(backendtest.Epoch)
	pol := admission.Policy{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
		Algorithm: limits.TokenBucket, Limit: 100, Per: time.Minute}
	c, err := admission.New(admission.Config{Policies: []admission.Policy{pol}}, admission.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()
	pol.Burst = 10
	if err := c.SetConfig(admission.Config{Policies: []admission.Policy{pol}}); err != nil {
		t.Fatal(err)
	}
	sts, err := c.Remaining(ctx, admission.Request{Tenant: "acme"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sts[0].Remaining > 10 {
		t.Errorf("Remaining = %d under a burst of 10", sts[0].Remaining)
	}
	if tk, err := c.TryAdmit(ctx, admission.Request{Tenant: "acme", Tokens: 50}); err == nil {
		tk.Done()
		t.Fatal("a request of 50 admitted under a burst of 10")
	}
}
