package grpcadmit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/fingerprint"
	"github.com/sluicehq/sluice/admission/grpcadmit"
	"github.com/sluicehq/sluice/admission/httpretry"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestSessions: a call's session comes from its x-session-id (or
// mcp-session-id) metadata and is counted under its tenant by a policy
// keyed by session: each session of a tenant has its own budget, a call
// without a session is not counted by it, and an invalid id is refused
// with InvalidArgument without being repeated.
func TestSessions(t *testing.T) {
	budget := admission.Policy{Name: "session-calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Algorithm: limits.Quota, Limit: 2, Per: time.Hour}
	r := newRig(t, []admission.Policy{budget}, nil)
	call := func(md ...string) codes.Code {
		ctx := metadata.AppendToOutgoingContext(t.Context(), append([]string{"x-api-key", acmeKey}, md...)...)
		_, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{})
		if msg := status.Convert(err).Message(); strings.Contains(msg, "bad id") {
			t.Errorf("the refusal %q repeats the session id", msg)
		}
		return status.Code(err)
	}
	for i, tt := range []struct {
		md   []string
		want codes.Code
	}{
		{[]string{"x-session-id", "run-1"}, codes.OK},
		{[]string{"mcp-session-id", "run-1"}, codes.OK},
		{[]string{"x-session-id", "run-1"}, codes.ResourceExhausted}, // run-1's budget of 2 is spent
		{[]string{"x-session-id", "run-2"}, codes.OK},
		{nil, codes.OK}, {nil, codes.OK}, {nil, codes.OK}, // no session: not counted by the budget
		{[]string{"x-session-id", "bad id"}, codes.InvalidArgument},
		{[]string{"x-session-id", strings.Repeat("s", 129)}, codes.InvalidArgument},
		{[]string{"x-session-id", "run-3", "x-session-id", "run-4"}, codes.InvalidArgument},
	} {
		if got := call(tt.md...); got != tt.want {
			t.Errorf("call %d %v: %v; want %v", i, tt.md, got, tt.want)
		}
	}
}

// TestSessionsIgnoredWithoutSessionPolicy: without a policy keyed by
// session, an invalid session id refuses nothing; WithSessions sets the
// keys read and the longest id.
func TestSessionsIgnoredWithoutSessionPolicy(t *testing.T) {
	r := newRig(t, []admission.Policy{perTenantRate("rpm", "", 100)}, nil)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", acmeKey, "x-session-id", "bad id")
	if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Errorf("an invalid session without session policies: %v; want admitted", err)
	}
	budget := admission.Policy{Name: "session-calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Algorithm: limits.Quota, Limit: 1, Per: time.Hour}
	r = newRig(t, []admission.Policy{budget}, []grpcadmit.Option{grpcadmit.WithSessions(8, "agent-run")})
	for i, tt := range []struct {
		md   []string
		want codes.Code
	}{
		{[]string{"agent-run", "run-1"}, codes.OK},
		{[]string{"agent-run", "run-1"}, codes.ResourceExhausted},
		{[]string{"x-session-id", "run-1"}, codes.OK},               // not a session key here: no session
		{[]string{"agent-run", "run-12345"}, codes.InvalidArgument}, // 9 bytes
	} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), append([]string{"x-api-key", acmeKey}, tt.md...)...)
		if _, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{}); status.Code(err) != tt.want {
			t.Errorf("call %d %v: %v; want %v", i, tt.md, err, tt.want)
		}
	}
}

// TestLoopRefusal: a session repeating one step past its loop policy is
// refused with FailedPrecondition, not a retryable ResourceExhausted:
// the message and the details (ErrorInfo LOOP_DETECTED with the policy,
// limit and window; PreconditionFailure naming the policy) give the
// loop's evidence, no RetryInfo is sent, RetryDelay reports no hint and
// the retrying client interceptor sends the call once; another step of
// the session, and the same step in another session, are served.
func TestLoopRefusal(t *testing.T) {
	loops := admission.Policy{Name: "loops", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession, limits.KeyFingerprint},
		Algorithm: limits.SlidingLog, Limit: 2, Per: 2 * time.Minute, Overflow: limits.OverflowEvict}
	step := grpcadmit.WithRequest(func(_ context.Context, _ string, msg any, r *admission.Request) error {
		r.Fingerprint = fingerprint.ToolCall("search", []byte(`{"query":"`+strconv.Itoa(int(msg.(*testpb.SimpleRequest).GetResponseSize()))+`"}`))
		return nil
	})
	attempts := 0
	tr := &httpretry.Transport{Sleep: func(context.Context, time.Duration) error {
		t.Error("the client waited to retry a loop refusal")
		return nil
	}}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts++
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	r := newRig(t, []admission.Policy{loops}, []grpcadmit.Option{step},
		grpc.WithChainUnaryInterceptor(grpcadmit.UnaryClientInterceptor(tr), count))
	call := func(session string, query int32) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", acmeKey, "x-session-id", session)
		_, err := r.cli.UnaryCall(ctx, &testpb.SimpleRequest{ResponseSize: query})
		return err
	}
	for i := range 2 {
		if err := call("run-1", 7); err != nil {
			t.Fatalf("step %d: %v; want served (2 allowed)", i, err)
		}
	}
	attempts = 0
	err := call("run-1", 7)
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition || attempts != 1 {
		t.Fatalf("third identical step: code %v after %d attempts (%v); want FailedPrecondition, sent once", st.Code(), attempts, err)
	}
	if want := `loop detected by policy "loops": the session made the same step more than 2 times within 2m0s`; !strings.HasPrefix(st.Message(), want) {
		t.Errorf("message = %q; want it to start %q", st.Message(), want)
	}
	var info *errdetails.ErrorInfo
	var pf *errdetails.PreconditionFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.PreconditionFailure:
			pf = d
		case *errdetails.RetryInfo, *errdetails.QuotaFailure:
			t.Errorf("loop refusal carries %T %v; want no retry hint nor quota", d, d)
		}
	}
	if info == nil || info.GetReason() != "LOOP_DETECTED" || info.GetDomain() != "sluice" ||
		info.GetMetadata()["policy"] != "loops" || info.GetMetadata()["limit"] != "2" || info.GetMetadata()["window"] != "2m0s" {
		t.Errorf("ErrorInfo = %v; want LOOP_DETECTED (sluice) with policy loops, limit 2, window 2m0s", info)
	}
	if pf == nil || len(pf.GetViolations()) != 1 || pf.GetViolations()[0].GetSubject() != "policy:loops" || pf.GetViolations()[0].GetType() != "LOOP_DETECTED" {
		t.Errorf("PreconditionFailure = %v; want one LOOP_DETECTED violation of policy:loops", pf)
	}
	if d, ok := grpcadmit.RetryDelay(err); ok {
		t.Errorf("RetryDelay = %v, true; want no hint", d)
	}
	if err := call("run-1", 8); err != nil {
		t.Errorf("another step of the session: %v; want served", err)
	}
	if err := call("run-2", 7); err != nil {
		t.Errorf("the same step in another session: %v; want served", err)
	}
}
