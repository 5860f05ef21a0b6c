package oteltrace_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/oteltrace"
)

// A rejected request's span holds one event per policy decision.
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-tenant", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.FixedWindow, Limit: 1, Per: time.Minute,
	}}}, admission.WithObserver(oteltrace.Observer{}))
	defer ctl.Close()
	for range 2 {
		ctx, span := tp.Tracer("example").Start(context.Background(), "request")
		if tk, err := ctl.Admit(ctx, admission.Request{Tenant: "acme"}); err == nil {
			tk.Done()
		}
		span.End()
	}
	for _, s := range spans.Ended() {
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				if kv.Key == oteltrace.KeyOutcome {
					fmt.Println(e.Name, kv.Value.AsString())
				}
			}
		}
	}
	// Output:
	// sluice.admission.decision admitted
	// sluice.admission.decision rejected
}
