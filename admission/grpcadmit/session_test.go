package grpcadmit_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/grpcadmit"
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
