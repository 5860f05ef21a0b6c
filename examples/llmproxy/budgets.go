package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/budget"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/reload"
)

// budgets is the gateway's budget warnings: the watcher of the quotas
// that declare warn (or soft), observing every decision beside the
// metrics, and the webhook of the budgets section, its secret read from
// the environment.
type budgets struct {
	watcher *budget.Watcher
	hook    *budget.Webhook
}

// newBudgets builds the watcher and the webhook of f; the webhook sends
// nothing while f has no budgets.webhook section.
func newBudgets(f *config.File, log *slog.Logger, mp metric.MeterProvider, clk admission.Clock) (*budgets, error) {
	wc, err := budget.FileWebhook(f, os.Getenv)
	if err != nil {
		return nil, err
	}
	b := &budgets{}
	if b.hook, err = budget.NewWebhook(wc, budget.WithLogger(log)); err != nil {
		return nil, err
	}
	opts := []budget.Option{budget.WithLogger(log), budget.WithMeterProvider(mp), budget.WithWebhook(b.hook)}
	if f.Metrics.TopTenants > 0 {
		opts = append(opts, budget.WithTopK(f.Metrics.TopTenants))
	}
	if clk != nil {
		opts = append(opts, budget.WithClock(clk))
	}
	if b.watcher, err = budget.New(budget.FileConfig(f), opts...); err != nil {
		_ = b.hook.Close()
		return nil, err
	}
	return b, nil
}

// subscriber returns next with the budgets following each reload: a
// file whose webhook secret is missing is refused before anything is
// installed. The webhook's queue keeps the size it started with.
func (b *budgets) subscriber(next reload.Subscriber) reload.Subscriber {
	return reloadBudgets{b, next}
}

type reloadBudgets struct {
	b    *budgets
	next reload.Subscriber
}

// Apply installs f in the gateway, then its thresholds and webhook. A
// file the gateway installed without a part of it (a
// *reload.PartialError: the tenant directory's section) has its budgets
// installed too, and the partial error is returned for the watcher to
// report.
func (r reloadBudgets) Apply(f *config.File) error {
	wc, err := budget.FileWebhook(f, os.Getenv)
	if err != nil {
		return err
	}
	cfg := budget.FileConfig(f)
	if err := cfg.Validate(); err != nil {
		return err
	}
	applied := r.next.Apply(f)
	var partial *reload.PartialError
	if applied != nil && !errors.As(applied, &partial) {
		return applied
	}
	if err := errors.Join(r.b.watcher.SetConfig(cfg), r.b.hook.SetConfig(wc)); err != nil {
		return err
	}
	return applied
}

// drainTime bounds how long shutdown waits for the webhook to deliver the
// warnings queued, out of the shutdown timeout.
const drainTime = 2 * time.Second

// drain delivers the queued warnings within ctx and drainTime.
func (b *budgets) drain(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, drainTime)
	defer cancel()
	_ = b.hook.Shutdown(ctx)
}

// close stops the watcher's metrics and the webhook's deliveries.
func (b *budgets) close() {
	_ = b.watcher.Close()
	_ = b.hook.Close()
}
