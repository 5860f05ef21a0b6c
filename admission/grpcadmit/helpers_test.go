package grpcadmit_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/grpcadmit"
)

// Full method names of the test service.
const (
	unaryMethod  = testpb.TestService_UnaryCall_FullMethodName
	emptyMethod  = testpb.TestService_EmptyCall_FullMethodName
	streamMethod = testpb.TestService_StreamingOutputCall_FullMethodName
)

// The API keys the test server knows.
const (
	acmeKey   = "sk-test-acme-0123456789"
	globexKey = "sk-test-globex-0123456789"
)

var testKeys = apikey.Table{
	apikey.Sum(acmeKey):   {Tenant: "acme", KeyID: "key_acme"},
	apikey.Sum(globexKey): {Tenant: "globex", KeyID: "key_globex"},
}

// service is the test service: UnaryCall panics when asked to (its
// response type is "panic"), StreamingOutputCall sends one response per
// parameter and then holds the stream open until the client ends it.
type service struct {
	testpb.UnimplementedTestServiceServer
}

func (service) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	return &testpb.Empty{}, nil
}

func (service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if req.GetFillUsername() {
		panic("handler failed")
	}
	id, _ := grpcadmit.IdentityFrom(ctx)
	return &testpb.SimpleResponse{Username: id.Tenant}, nil
}

func (service) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for range max(1, len(req.GetResponseParameters())) {
		if err := ss.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	<-ss.Context().Done()
	return ss.Context().Err()
}

// recovered turns a handler's panic into codes.Internal, as a recovery
// interceptor placed before the admission interceptor does.
func recovered(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Error(codes.Internal, "panic")
		}
	}()
	return handler(ctx, req)
}

// observer records the decisions and settlements of a controller.
type observer struct {
	admission.NopObserver
	mu        sync.Mutex
	outcomes  map[admission.Outcome]int
	decisions int
	settled   chan admission.Settlement
}

func newObserver() *observer {
	return &observer{outcomes: map[admission.Outcome]int{}, settled: make(chan admission.Settlement, 100)}
}

func (o *observer) Decision(d *admission.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes[d.Outcome]++
	o.decisions++
}

func (o *observer) Settled(s admission.Settlement) { o.settled <- s }

func (o *observer) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.decisions
}

func (o *observer) count(out admission.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.outcomes[out]
}

// rig is a controller on a fake clock behind a real gRPC server on
// loopback, and a client connection to it.
type rig struct {
	clock *admissiontest.Clock
	ctl   *admission.Controller
	obs   *observer
	conn  *grpc.ClientConn
	cli   testpb.TestServiceClient
}

// newRig serves the test service behind an interceptor of policies and
// opts; client options dial it.
func newRig(t *testing.T, policies []admission.Policy, opts []grpcadmit.Option, dial ...grpc.DialOption) *rig {
	t.Helper()
	return newRigWith(t, nil, policies, opts, dial...)
}

// newRigWith is newRig with more options of the controller.
func newRigWith(t *testing.T, ctlOpts []admission.Option, policies []admission.Policy, opts []grpcadmit.Option, dial ...grpc.DialOption) *rig {
	t.Helper()
	r := &rig{clock: admissiontest.NewClock(backendtest.Epoch), obs: newObserver()}
	ctlOpts = append([]admission.Option{admission.WithClock(r.clock), admission.WithObserver(r.obs)}, ctlOpts...)
	ctl, err := admission.New(admission.Config{Policies: policies}, ctlOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Close() })
	r.ctl = ctl
	ic, err := grpcadmit.New(ctl, append([]grpcadmit.Option{grpcadmit.WithKeys(testKeys)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovered, ic.Unary), grpc.ChainStreamInterceptor(ic.Stream))
	testpb.RegisterTestServiceServer(srv, service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r.conn, r.cli = conn, testpb.NewTestServiceClient(conn)
	return r
}

// as returns ctx with metadata carrying key as a bearer token.
func as(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}
