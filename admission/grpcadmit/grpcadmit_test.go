package grpcadmit_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/grpcadmit"
	"github.com/sluicehq/sluice/admission/httpretry"
	"github.com/sluicehq/sluice/admission/limits"
)

// perTenantRate allows n calls of method (every method: "") per minute
// to each tenant.
func perTenantRate(name, method string, n int64) admission.Policy {
	p := admission.Policy{
		Name: name, Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.TokenBucket, Limit: n, Per: time.Minute,
	}
	if method != "" {
		p.Match.Operations = []string{method}
	}
	return p
}

// perTenantStreams allows n streams of method open at once per tenant.
func perTenantStreams(method string, n int64) admission.Policy {
	return admission.Policy{
		Name: "streams", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.Concurrency, Limit: n,
		Match: limits.Match{Operations: []string{method}},
	}
}

// details returns the RetryInfo and QuotaFailure of err's status.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// TestUnaryRefusal: a unary call over its tenant's rate is refused with
// ResourceExhausted, the wait in RetryInfo and the policy in
// QuotaFailure, read back by a real client; a method the policy does not
// name, and another tenant, are not limited by it.
func TestUnaryRefusal(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantRate("unary-rpm", unaryMethod, 1)}, nil)
	ctx := as(t.Context(), acmeKey)

	var header metadata.MD
	resp, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	if resp.GetUsername() != "acme" {
		t.Errorf("handler saw tenant %q; want acme", resp.GetUsername())
	}
	if got, want := header.Get("ratelimit-policy"), []string{`"unary-rpm";q=1;w=60`}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("admitted call's ratelimit-policy = %q; want %q", got, want)
	}

	header = nil
	_, err = r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header))
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("second call: code %v (%v); want ResourceExhausted", code, err)
	}
	ri, qf := details(t, err)
	if ri == nil || ri.GetRetryDelay().AsDuration() != time.Minute {
		t.Errorf("RetryInfo = %v; want a delay of 1m0s", ri)
	}
	if d, ok := grpcadmit.RetryDelay(err); !ok || d != time.Minute {
		t.Errorf("RetryDelay = %v, %v; want 1m0s, true", d, ok)
	}
	if qf == nil || len(qf.GetViolations()) != 1 || qf.GetViolations()[0].GetSubject() != "policy:unary-rpm" ||
		!strings.Contains(qf.GetViolations()[0].GetDescription(), "rate") {
		t.Errorf("QuotaFailure = %v; want one violation of policy:unary-rpm, reason rate", qf)
	}
	if got := header.Get("ratelimit"); len(got) != 1 || got[0] != `"unary-rpm";r=0;t=60` {
		t.Errorf("refused call's ratelimit = %q; want \"unary-rpm\";r=0;t=60", got)
	}

	// Per method: EmptyCall is not matched by the policy.
	for i := range 3 {
		if _, err := r.cli.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Errorf("EmptyCall %d: %v; want admitted (no policy names it)", i, err)
		}
	}
	// Per tenant: globex has its own partition.
	if _, err := r.cli.UnaryCall(as(t.Context(), globexKey), &testpb.SimpleRequest{}); err != nil {
		t.Errorf("globex's first call: %v; want admitted", err)
	}
}

// TestStreamHoldsPermit: a stream holds its concurrency permit for its
// whole life: a second stream is refused while the first is open,
// however many messages the first carries, and admitted once it ended.
func TestStreamHoldsPermit(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantStreams(streamMethod, 1)}, nil)

	ctx1, end1 := context.WithCancel(as(t.Context(), acmeKey))
	defer end1()
	first, err := r.cli.StreamingOutputCall(ctx1, &testpb.StreamingOutputCallRequest{
		ResponseParameters: []*testpb.ResponseParameters{{}, {}, {}, {}, {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := first.Recv(); err != nil {
			t.Fatalf("first stream, message %d: %v", i, err)
		}
	}

	second, err := r.cli.StreamingOutputCall(as(t.Context(), acmeKey), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if code := status.Code(err); code != codes.ResourceExhausted {
		t.Fatalf("second stream while the first is open: code %v (%v); want ResourceExhausted", code, err)
	}
	if _, qf := details(t, err); qf == nil || qf.GetViolations()[0].GetSubject() != "policy:streams" {
		t.Errorf("QuotaFailure = %v; want policy:streams", qf)
	}

	// The first stream ends: its permit is released once, when its
	// handler returns.
	end1()
	if s := <-r.obs.settled; s.Policy != "streams" || s.Tenant != "acme" {
		t.Errorf("settlement = %+v; want the streams policy's, for acme", s)
	}

	ctx3, end3 := context.WithCancel(as(t.Context(), acmeKey))
	defer end3()
	third, err := r.cli.StreamingOutputCall(ctx3, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := third.Recv(); err != nil {
		t.Fatalf("third stream after the first ended: %v; want admitted", err)
	}
	end3()
	<-r.obs.settled
	select {
	case s := <-r.obs.settled:
		t.Errorf("extra settlement %+v: a permit released twice", s)
	default:
	}
}

// TestPanicReleasesPermit: a handler that panics (recovered by an
// interceptor in front) still gives its permit back.
func TestPanicReleasesPermit(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantStreams(unaryMethod, 1)}, nil)
	ctx := as(t.Context(), acmeKey)
	_, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{FillUsername: true})
	if code := status.Code(err); code != codes.Internal {
		t.Fatalf("panicking call: code %v (%v); want Internal", code, err)
	}
	if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Errorf("call after the panic: %v; want admitted (the permit was released)", err)
	}
}

// TestUnauthenticated: a call with an unknown key, an oversized key, or
// a tenant claim its key does not back is refused with Unauthenticated,
// before any policy sees it.
func TestUnauthenticated(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantRate("rpm", "", 100)}, []grpcadmit.Option{grpcadmit.WithTenantHeader("X-Tenant")})
	for _, tt := range []struct {
		name string
		md   []string
	}{
		{"unknown key", []string{"authorization", "Bearer sk-nobody"}},
		{"unknown x-api-key", []string{"x-api-key", "sk-nobody"}},
		{"oversized key", []string{"authorization", "Bearer " + strings.Repeat("k", apikey.MaxKeyLen+1)}},
		{"tenant claim not the key's", []string{"authorization", "Bearer " + acmeKey, "x-tenant", "globex"}},
		{"anonymous claims a tenant", []string{"x-tenant", "acme"}},
	} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), tt.md...)
		_, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{})
		if code := status.Code(err); code != codes.Unauthenticated {
			t.Errorf("%s: code %v (%v); want Unauthenticated", tt.name, code, err)
		}
		if msg := status.Convert(err).Message(); strings.Contains(msg, "sk-") || strings.Contains(msg, "globex") {
			t.Errorf("%s: message %q repeats the caller's input", tt.name, msg)
		}
	}
	if n := r.obs.total(); n != 0 {
		t.Errorf("%d decisions for unauthenticated calls; want none (no partition)", n)
	}
	resp, err := r.cli.UnaryCall(metadata.AppendToOutgoingContext(t.Context(), "x-api-key", acmeKey, "x-tenant", "acme"), &testpb.SimpleRequest{})
	if err != nil || resp.GetUsername() != "acme" {
		t.Errorf("acme's key with its own tenant claim: %v, %v; want admitted as acme", resp, err)
	}
	resp, err = r.cli.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	if err != nil || resp.GetUsername() != "anonymous" {
		t.Errorf("no credential: %v, %v; want admitted as anonymous", resp, err)
	}
}

// TestShadow: a shadow policy never refuses a call, and the controller's
// observer sees its would-reject decisions as it does HTTP requests'.
func TestShadow(t *testing.T) {
	p := perTenantRate("candidate", unaryMethod, 1)
	p.Mode = limits.Shadow
	r := newRig(t, []admission.Policy{p}, []grpcadmit.Option{grpcadmit.WithShadowHeader(true)})
	ctx := as(t.Context(), acmeKey)
	for i, want := range []string{"", "candidate", "candidate"} {
		var header metadata.MD
		if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&header)); err != nil {
			t.Fatalf("call %d: %v; a shadow policy must not refuse", i, err)
		}
		if got := header.Get("ratelimit-policy"); len(got) != 0 {
			t.Errorf("call %d: ratelimit-policy %q; shadow policies never appear", i, got)
		}
		if got := strings.Join(header.Get("sluice-would-reject"), ","); got != want {
			t.Errorf("call %d: sluice-would-reject %q; want %q", i, got, want)
		}
	}
	if got := r.obs.count(admission.WouldReject); got != 2 {
		t.Errorf("would-reject decisions = %d; want 2", got)
	}
	if got := r.obs.count(admission.Admitted); got != 1 {
		t.Errorf("admitted decisions = %d; want 1", got)
	}
}

// TestHealthExempt: the health service is never limited.
func TestHealthExempt(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantRate("all", "", 1)}, nil)
	var got []string
	ic, err := grpcadmit.New(r.ctl)
	if err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, req any) (any, error) { return nil, nil }
	for _, m := range []string{"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Check", emptyMethod, emptyMethod} {
		_, err := ic.Unary(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: m}, handler)
		got = append(got, status.Code(err).String())
	}
	want := []string{"OK", "OK", "OK", "ResourceExhausted"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("codes = %v; want %v", got, want)
	}
}

// TestClientRetriesAfterHint: the client interceptor waits the server's
// hint (on the fake clock, with the jitter drawn at 0) and the retry is
// admitted; a hint that would end past the call's deadline is not waited.
func TestClientRetriesAfterHint(t *testing.T) {
	var sleeps []time.Duration
	var r *rig
	tr := &httpretry.Transport{
		Rand: func() float64 { return 0 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			sleeps = append(sleeps, d)
			r.clock.Advance(d)
			return nil
		},
	}
	// The server sees the retry numbered (grpc-previous-rpc-attempts, as
	// gRPC's own retries number theirs): admission.Request.Retry.
	var retries []bool
	seen := grpcadmit.WithRequest(func(_ context.Context, _ string, _ any, req *admission.Request) error {
		retries = append(retries, req.Retry)
		return nil
	})
	r = newRig(t, []admission.Policy{perTenantRate("unary-rpm", unaryMethod, 1)}, []grpcadmit.Option{seen},
		grpc.WithUnaryInterceptor(grpcadmit.UnaryClientInterceptor(tr)))
	ctx := as(t.Context(), acmeKey)
	for i := range 2 {
		if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("call %d: %v; want admitted (after a wait for the second)", i, err)
		}
	}
	if len(sleeps) != 1 || sleeps[0] != time.Minute {
		t.Errorf("waits = %v; want [1m0s], the server's hint", sleeps)
	}
	if !slices.Equal(retries, []bool{false, false, true}) {
		t.Errorf("retry marks the server saw = %v; want the third sending (the second call's retry) marked", retries)
	}

	// A deadline 30 s away: the one-minute hint is not waited, and the
	// refusal comes back as it is.
	sleeps = nil
	deadline := time.Now().Add(time.Hour)
	tr.Now = func() time.Time { return deadline.Add(-30 * time.Second) }
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	_, err := r.cli.UnaryCall(dctx, &testpb.SimpleRequest{})
	if code := status.Code(err); code != codes.ResourceExhausted || len(sleeps) != 0 {
		t.Errorf("call with 30 s left: code %v, waits %v; want ResourceExhausted at once", code, sleeps)
	}
}

// TestClientAttemptsBounded: the client gives up after MaxAttempts.
func TestClientAttemptsBounded(t *testing.T) {
	calls := 0
	refuse := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		calls++
		st, _ := status.New(codes.ResourceExhausted, "over").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		return st.Err()
	}
	waits := 0
	tr := &httpretry.Transport{MaxAttempts: 3, Sleep: func(context.Context, time.Duration) error { waits++; return nil }}
	err := grpcadmit.UnaryClientInterceptor(tr)(t.Context(), unaryMethod, nil, nil, nil, refuse)
	if status.Code(err) != codes.ResourceExhausted || calls != 3 || waits != 2 {
		t.Errorf("err %v after %d calls and %d waits; want ResourceExhausted after 3 calls and 2 waits", err, calls, waits)
	}
	// Without RetryInfo (waiting cannot help), no retry.
	calls = 0
	noHint := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		calls++
		return status.Error(codes.ResourceExhausted, "over")
	}
	err = grpcadmit.UnaryClientInterceptor(tr)(t.Context(), unaryMethod, nil, nil, nil, noHint)
	if status.Code(err) != codes.ResourceExhausted || calls != 1 {
		t.Errorf("no hint: err %v after %d calls; want one call", err, calls)
	}
	// The context ends while waiting: its status.
	ended := &httpretry.Transport{Sleep: func(ctx context.Context, _ time.Duration) error { return context.Canceled }}
	err = grpcadmit.UnaryClientInterceptor(ended)(t.Context(), unaryMethod, nil, nil, nil, refuse)
	if status.Code(err) != codes.Canceled {
		t.Errorf("cancelled wait: %v; want Canceled", err)
	}
}

// TestRetryDelayOnlyHinted: RetryDelay reads RetryInfo only from the
// codes of a refusal, and refuses a negative delay.
func TestRetryDelayOnlyHinted(t *testing.T) {
	ok, _ := status.New(codes.Unavailable, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	negative, _ := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(-time.Second)})
	internal, _ := status.New(codes.Internal, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{ok.Err(), true},
		{internal.Err(), false},
		{negative.Err(), false},
		{errors.New("plain"), false},
		{nil, false},
	} {
		if _, got := grpcadmit.RetryDelay(tt.err); got != tt.want {
			t.Errorf("RetryDelay(%v) = %v; want %v", tt.err, got, tt.want)
		}
	}
}

// TestLongMethodBounded: a full method name over 256 bytes (an
// unknown-service handler sees whatever the client sends) is the empty
// operation, so that a client cannot make a partition per name of its
// choosing under a policy keyed by operation.
func TestLongMethodBounded(t *testing.T) {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "per-operation", Key: []limits.KeyPart{limits.KeyOperation},
		Algorithm: limits.TokenBucket, Limit: 1, Per: time.Minute,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ic, err := grpcadmit.New(ctl)
	if err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, req any) (any, error) { return nil, nil }
	var got []codes.Code
	for _, c := range "ab" {
		m := "/x.Y/" + strings.Repeat(string(c), 300)
		_, err := ic.Unary(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: m}, handler)
		got = append(got, status.Code(err))
	}
	if got[0] != codes.OK || got[1] != codes.ResourceExhausted {
		t.Errorf("two long method names: codes %v; want OK then ResourceExhausted (one partition)", got)
	}
}

// TestStreamClientRetries: a server-streaming call refused while
// another stream holds the tenant's one permit is opened again after
// the hint (the wait, on the fake clock, is when the other stream ends)
// and receives its responses; a refusal past the attempt budget comes
// back as it is.
func TestStreamClientRetries(t *testing.T) {
	var r *rig
	var waits []time.Duration
	var endFirst context.CancelFunc
	tr := &httpretry.Transport{
		Rand: func() float64 { return 0 },
		Sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			if endFirst != nil {
				endFirst()
				endFirst = nil
				<-r.obs.settled
			}
			r.clock.Advance(d)
			return nil
		},
	}
	r = newRig(t, []admission.Policy{perTenantStreams(streamMethod, 1)}, nil,
		grpc.WithStreamInterceptor(grpcadmit.StreamClientInterceptor(tr)))

	open := func() (context.CancelFunc, grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]) {
		ctx, cancel := context.WithCancel(as(t.Context(), acmeKey))
		s, err := r.cli.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}, {}}})
		if err != nil {
			t.Fatal(err)
		}
		return cancel, s
	}
	end1, first := open()
	defer end1()
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	endFirst = end1

	end2, second := open()
	defer end2()
	for i := range 2 {
		if _, err := second.Recv(); err != nil {
			t.Fatalf("second stream, message %d: %v; want admitted once the first ended", i, err)
		}
	}
	if len(waits) != 1 || waits[0] != time.Second {
		t.Errorf("waits = %v; want [1s], the concurrency policy's hint", waits)
	}

	// The second stream holds the permit now, and nothing ends it: a
	// third is refused after its attempts (4, so 3 waits).
	waits = nil
	end3, third := open()
	defer end3()
	_, err := third.Recv()
	if code := status.Code(err); code != codes.ResourceExhausted || len(waits) != 3 {
		t.Errorf("third stream: code %v after %d waits; want ResourceExhausted after 3", code, len(waits))
	}
}

// TestTenantClaimSentTwice: a tenant claim is checked whole. A call
// whose tenant header carries its key's tenant and another one is
// refused, whichever comes first: a handler that reads the claim would
// otherwise trust a tenant the key does not stand for.
func TestTenantClaimSentTwice(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantRate("rpm", "", 100)}, []grpcadmit.Option{grpcadmit.WithTenantHeader("X-Tenant")})
	for _, claims := range [][]string{{"acme", "globex"}, {"globex", "acme"}, {"", "globex"}} {
		md := []string{"authorization", "Bearer " + acmeKey}
		for _, c := range claims {
			md = append(md, "x-tenant", c)
		}
		_, err := r.cli.UnaryCall(metadata.AppendToOutgoingContext(t.Context(), md...), &testpb.SimpleRequest{})
		if code := status.Code(err); code != codes.Unauthenticated {
			t.Errorf("acme's key claiming tenants %q: code %v (%v); want Unauthenticated", claims, code, err)
		}
	}
	resp, err := r.cli.UnaryCall(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+acmeKey, "x-tenant", "acme", "x-tenant", "acme"), &testpb.SimpleRequest{})
	if err != nil || resp.GetUsername() != "acme" {
		t.Errorf("acme's key claiming acme twice: %v, %v; want admitted as acme", resp, err)
	}
}
