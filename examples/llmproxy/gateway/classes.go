package gateway

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/metrics"
)

// classify sets the priority class of an identified request from the
// policy file of st: its classes section names where a class comes from
// (the key's entry, the route, the tenant's plan, a header only for the
// keys it lists; see config.Classes), and the policies' queue.shares
// reserve each class its part of a shared limit.
func (st *state) classify(r *http.Request, req *admission.Request) {
	req.Priority = st.file.Priority(req.Tenant, req.KeyID, req.Operation, r.Header.Values)
}

// className returns the name of the class of priority prio in st's file,
// or "none": a label from the file's closed set (config.MaxClasses).
func (st *state) className(prio int) string {
	for name, p := range st.file.Classes.Priorities {
		if p == prio {
			return name
		}
	}
	return "none"
}

// classInstruments measure the queue wait of the token-priced requests
// by class.
type classInstruments struct {
	wait metric.Float64Histogram
	opts sync.Map // class name → metric.RecordOption
}

// initClasses creates llmproxy.queue.wait: the time an admitted request
// spent in the admission queues, by class.
func (m *instruments) initClasses(meter metric.Meter) error {
	var err error
	m.classes.wait, err = meter.Float64Histogram("llmproxy.queue.wait",
		metric.WithDescription("Time the admitted token-priced requests spent in admission queues, by priority class (the classes section's names; none without one)."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(metrics.QueueWaitBuckets...))
	return err
}

// queueWaited records how long an admitted request of priority prio
// waited in queues.
func (g *Gateway) queueWaited(ctx context.Context, st *state, prio int, tk admission.Ticket) {
	c := &g.m.classes
	if c.wait == nil {
		return
	}
	name := st.className(prio)
	o, ok := c.opts.Load(name)
	if !ok {
		o, _ = c.opts.LoadOrStore(name, metric.WithAttributeSet(attribute.NewSet(attribute.String("class", name))))
	}
	c.wait.Record(ctx, tk.QueueWait().Seconds(), o.(metric.RecordOption))
}
