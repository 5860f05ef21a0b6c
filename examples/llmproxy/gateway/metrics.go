package gateway

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// instruments are the gateway's own metrics, next to the admission
// metrics: what the upstream answered (its 429s apart from ours), how calls
// failed, streams cut and charged, client errors and cancellations. Every
// label comes from a closed set.
type instruments struct {
	upstreamResponses metric.Int64Counter
	upstreamThrottled metric.Int64Counter
	upstreamFailures  metric.Int64Counter
	rejections        metric.Int64Counter
	clientErrors      metric.Int64Counter
	clientCancels     metric.Int64Counter
	streams           metric.Int64UpDownCounter
	streamsCut        metric.Int64Counter
	charges           chargeCounter
	authFailures      metric.Int64Counter
	authThrottled     metric.Int64Counter
	usageFallbacks    metric.Int64Counter
	fallbackPrices    metric.Int64Counter
	provider          providerInstruments
	classes           classInstruments
	opts              sync.Map // attribute key=value → metric.AddOption
	// regs are the callbacks of the observable instruments, which
	// Gateway.Close unregisters: a closed gateway reports nothing more and
	// is not kept alive by its meter.
	regs []metric.Registration
}

// unregister ends the reports of the observable instruments.
func (m *instruments) unregister() error {
	var errs []error
	for _, r := range m.regs {
		errs = append(errs, r.Unregister())
	}
	m.regs = nil
	return errors.Join(errs...)
}

func (m *instruments) init(meter metric.Meter) error {
	var errs [13]error
	m.upstreamResponses, errs[0] = meter.Int64Counter("llmproxy.upstream.responses",
		metric.WithDescription("Responses received from the upstream API, by status class."), metric.WithUnit("{response}"))
	m.upstreamThrottled, errs[1] = meter.Int64Counter("llmproxy.upstream.throttled",
		metric.WithDescription("429 responses from the upstream API (the provider throttling the gateway, not the gateway throttling a tenant)."), metric.WithUnit("{response}"))
	m.upstreamFailures, errs[2] = meter.Int64Counter("llmproxy.upstream.failures",
		metric.WithDescription("Upstream calls that failed without a usable response, by reason."), metric.WithUnit("{call}"))
	m.rejections, errs[3] = meter.Int64Counter("llmproxy.rejections",
		metric.WithDescription("Requests the gateway rejected, by OpenAI error code."), metric.WithUnit("{request}"))
	m.clientErrors, errs[4] = meter.Int64Counter("llmproxy.client.errors",
		metric.WithDescription("Requests refused before admission (bad key, bad body), by code."), metric.WithUnit("{request}"))
	m.clientCancels, errs[5] = meter.Int64Counter("llmproxy.client.cancels",
		metric.WithDescription("Requests the client abandoned, by phase."), metric.WithUnit("{request}"))
	m.streams, errs[6] = meter.Int64UpDownCounter("llmproxy.streams.active",
		metric.WithDescription("Streams being passed through now."), metric.WithUnit("{stream}"))
	m.streamsCut, errs[7] = meter.Int64Counter("llmproxy.streams.cut",
		metric.WithDescription("Streams cut off because the tenant's limit ran out, by code."), metric.WithUnit("{stream}"))
	var reg metric.Registration
	if reg, errs[8] = m.charges.init(meter); reg != nil {
		m.regs = append(m.regs, reg)
	}
	m.authFailures, errs[9] = meter.Int64Counter("llmproxy.auth.failures",
		metric.WithDescription("Requests with a missing or unknown API key, by reason (missing_api_key, invalid_api_key)."), metric.WithUnit("{request}"))
	m.authThrottled, errs[10] = meter.Int64Counter("llmproxy.auth.throttled",
		metric.WithDescription("Requests refused with 429 before their key was looked at, because their address had failed authentication too often."), metric.WithUnit("{request}"))
	m.usageFallbacks, errs[11] = meter.Int64Counter("llmproxy.usage.fallbacks",
		metric.WithDescription("Settlements that charged the reservation because the upstream's usage report was missing, malformed, negative or implausible, by reason."), metric.WithUnit("{request}"))
	m.fallbackPrices, errs[12] = meter.Int64Counter("llmproxy.prices.fallbacks",
		metric.WithDescription("Requests for a model without a price of its own, charged the policy file's fallback price."), metric.WithUnit("{request}"))
	return errors.Join(errs[:]...)
}

// opt returns the prebuilt attribute option for key=value.
func (m *instruments) opt(key, value string) metric.AddOption {
	k := key + "=" + value
	if o, ok := m.opts.Load(k); ok {
		return o.(metric.AddOption)
	}
	o, _ := m.opts.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attribute.String(key, value))))
	return o.(metric.AddOption)
}

// count adds one to c with the label every counter of the gateway uses.
func (m *instruments) count(ctx context.Context, c metric.Int64Counter, value string) {
	c.Add(ctx, 1, m.opt("reason", value))
}

func (m *instruments) rejected(ctx context.Context, code string) {
	m.rejections.Add(ctx, 1, m.opt("code", code))
}

func (m *instruments) upstreamStatus(ctx context.Context, status int) {
	class := "other"
	switch {
	case status == 429:
		class = "429"
		m.upstreamThrottled.Add(ctx, 1)
	case status >= 200 && status < 300:
		class = "2xx"
	case status >= 400 && status < 500:
		class = "4xx"
	case status >= 500:
		class = "5xx"
	}
	m.upstreamResponses.Add(ctx, 1, m.opt("status_class", class))
}
