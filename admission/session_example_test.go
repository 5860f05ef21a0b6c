package admission_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
)

// A budget of two steps per agent session, counted under the tenant: the
// third call of a session is refused, another session of the tenant is
// not, and a request without a session is not counted by the policy.
func Example_sessionBudget() {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "session-steps", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession}, Unit: limits.UnitSteps,
		Algorithm: limits.Quota, Limit: 2, Per: 7 * 24 * time.Hour,
	}}})
	if err != nil {
		panic(err)
	}
	step := []admission.UnitAmount{{Unit: limits.UnitSteps, Amount: 1}}
	for _, session := range []string{"run-1", "run-1", "run-1", "run-2", ""} {
		tk, err := ctl.TryAdmit(context.Background(), admission.Request{Tenant: "acme", Session: session, Units: step})
		var rej *admission.Rejection
		if errors.As(err, &rej) {
			fmt.Printf("%q: refused by %s (%s)\n", session, rej.Policy, rej.Reason)
			continue
		}
		if err != nil {
			panic(err)
		}
		tk.Done()
		fmt.Printf("%q: admitted\n", session)
	}
	// Output:
	// "run-1": admitted
	// "run-1": admitted
	// "run-1": refused by session-steps (quota)
	// "run-2": admitted
	// "": admitted
}
