package admissiontest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
)

// A fake clock drives a queue timeout without waiting for real time.
func ExampleClock() {
	clock := admissiontest.NewClock(backendtest.Epoch)
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "inflight", Algorithm: limits.Concurrency, Limit: 1,
		Queue: limits.Queue{Size: 1, Timeout: 2 * time.Second},
	}}}, admission.WithClock(clock))
	ctx := context.Background()
	held, _ := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
	done := make(chan error)
	go func() {
		_, err := ctl.Admit(ctx, admission.Request{Tenant: "acme"})
		done <- err
	}()
	for ctl.Stats()[0].Queued == 0 {
		time.Sleep(time.Millisecond) // until the request waits in the queue
	}
	clock.Advance(2 * time.Second) // runs the queue's timeout
	err := <-done
	fmt.Println(errors.Is(err, admission.ErrQueueTimeout), clock.Now().Sub(backendtest.Epoch))
	held.Done()
	// Output:
	// true 2s
}
