package grpcadmit_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStoreDown: with its Redis gone, a policy failing closed refuses
// with Unavailable and a retry hint but no figures (they would describe
// the service), as HTTP answers 503; one failing open admits.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, redisstore.Config{Name: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	closed := perTenantRate("closed", unaryMethod, 100)
	closed.Store, closed.OnStoreError = "redis", limits.FailClosedMode
	open := perTenantRate("open", emptyMethod, 100)
	open.Store, open.OnStoreError = "redis", limits.FailOpenMode
	r := newRigWith(t, []admission.Option{admission.WithStore("redis", store)}, []admission.Policy{closed, open}, nil)
	ctx := as(t.Context(), acmeKey)
	if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	srv.Stop()
	_, err = r.cli.UnaryCall(ctx, &testpb.SimpleRequest{})
	if code := status.Code(err); code != codes.Unavailable {
		t.Fatalf("closed policy with Redis down: code %v (%v); want Unavailable", code, err)
	}
	ri, qf := details(t, err)
	if ri == nil || qf != nil {
		t.Errorf("details: RetryInfo %v, QuotaFailure %v; want a retry hint and no figures", ri, qf)
	}
	if _, err := r.cli.EmptyCall(ctx, &testpb.Empty{}); err != nil {
		t.Errorf("open policy with Redis down: %v; want admitted", err)
	}
}
