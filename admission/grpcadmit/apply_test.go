package grpcadmit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/grpcadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestApplyIsOneStep: Apply installs policies and keys as one value read
// once per call. A call that started before an Apply is decided by the
// policies it started with even when the Apply lands between its
// identification and its decision; calls after it see the new keys and
// the new limits together.
func TestApplyIsOneStep(t *testing.T) {
	config := func(limit int64) admission.Config {
		return admission.Config{Policies: []admission.Policy{{
			Name: "rph", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.FixedWindow, Limit: limit, Per: time.Hour,
		}}}
	}
	acmeOnly := apikey.Table{apikey.Sum(acmeKey): {Tenant: "acme", KeyID: "key_acme"}}
	ctl, err := admission.New(config(1), admission.WithClock(admissiontest.NewClock(backendtest.Epoch)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	var ic *grpcadmit.Interceptor
	var reloadInCall atomic.Bool
	applied := make(chan error, 1)
	ic, err = grpcadmit.New(ctl, grpcadmit.WithRequireKey(), grpcadmit.WithRequest(func(context.Context, string, any, *admission.Request) error {
		if reloadInCall.CompareAndSwap(true, false) {
			// The reload lands after this call was identified, before it is decided.
			applied <- ic.Apply(config(5), grpcadmit.WithKeys(testKeys))
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := ic.Apply(config(1), grpcadmit.WithKeys(acmeOnly)); err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary))
	testpb.RegisterTestServiceServer(srv, service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	cli := testpb.NewTestServiceClient(conn)
	call := func(key string) codes.Code {
		_, err := cli.UnaryCall(as(context.Background(), key), &testpb.SimpleRequest{})
		return status.Code(err)
	}

	if c := call(globexKey); c != codes.Unauthenticated {
		t.Fatalf("globex before the reload: %v; want Unauthenticated (its key is not in the table yet)", c)
	}
	if c := call(acmeKey); c != codes.OK {
		t.Fatalf("acme's first call: %v; want OK", c)
	}
	reloadInCall.Store(true)
	if c := call(acmeKey); c != codes.ResourceExhausted {
		t.Errorf("acme's second call, with a reload to 5 per hour landing inside it: %v; want ResourceExhausted (decided by the 1 per hour it started under)", c)
	}
	if err := <-applied; err != nil {
		t.Fatalf("the reload inside the call: %v", err)
	}
	if c := call(acmeKey); c != codes.OK {
		t.Errorf("acme after the reload: %v; want OK (5 per hour, the partition kept)", c)
	}
	if c := call(globexKey); c != codes.OK {
		t.Errorf("globex after the reload: %v; want OK (its key came with the new limits)", c)
	}
	if got := ctl.Policies()[0].Limit; got != 5 {
		t.Errorf("the controller's installed limit after Apply: %d; want 5", got)
	}
}

// TestEstimatesBounded: an estimate above limits.MaxAmount is saturated,
// as HTTP does, and refused as larger than any limit (ResourceExhausted,
// no retry hint: waiting cannot help); a negative one is the caller's
// error (InvalidArgument).
func TestEstimatesBounded(t *testing.T) {
	tpm := admission.Policy{Name: "tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
		Algorithm: limits.TokenBucket, Limit: 1000, Per: time.Minute}
	estimate := grpcadmit.WithRequest(func(_ context.Context, _ string, msg any, r *admission.Request) error {
		switch msg.(*testpb.SimpleRequest).GetResponseSize() {
		case 1:
			r.Tokens = 1 << 62
		case 2:
			r.Tokens = -1
		default:
			r.Tokens = 10
		}
		return nil
	})
	r := newRig(t, []admission.Policy{tpm}, []grpcadmit.Option{estimate})
	ctx := as(t.Context(), acmeKey)
	_, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 1})
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("an estimate of 2^62 tokens: %v; want ResourceExhausted", err)
	}
	if d, ok := grpcadmit.RetryDelay(err); ok {
		t.Errorf("an estimate larger than any limit advises a retry in %v; want none", d)
	}
	if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: 2}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a negative estimate: %v; want InvalidArgument", err)
	}
	if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Errorf("an estimate of 10 tokens after both: %v; want admitted (nothing was charged)", err)
	}
}
