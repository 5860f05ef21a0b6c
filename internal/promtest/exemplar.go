package promtest

import (
	"context"
	"testing"
	"time"
)

// AwaitExemplar asks s for the exemplars of the series expr selects until
// one carries the trace id traceID and the span id spanID (lower-case
// hex), and returns the labels of its series. Prometheus scrapes on its
// own schedule, so no deadline of its own is set: a scrape that never
// comes is ended by go test's -timeout, and the last answer is logged
// every 10 queries meanwhile.
func (s *Server) AwaitExemplar(t testing.TB, expr, traceID, spanID string) map[string]string {
	t.Helper()
	for i := 1; ; i++ {
		last, err := s.QueryExemplars(context.Background(), expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, se := range last {
			for _, e := range se.Exemplars {
				if e.Labels["trace_id"] == traceID && e.Labels["span_id"] == spanID {
					return se.SeriesLabels
				}
			}
		}
		if i%10 == 0 {
			t.Logf("query_exemplars %s: still no exemplar with trace_id %s and span_id %s; got %+v", expr, traceID, spanID, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
