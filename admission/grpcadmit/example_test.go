package grpcadmit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/grpcadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// unaryService answers UnaryCall.
type unaryService struct {
	testpb.UnimplementedTestServiceServer
}

func (unaryService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// A gRPC server allowing each tenant two UnaryCall calls a minute: the
// third is refused with ResourceExhausted and the wait in RetryInfo.
func Example() {
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "unary-per-minute", Key: []limits.KeyPart{limits.KeyTenant},
		Algorithm: limits.FixedWindow, Limit: 2, Per: time.Minute,
		Match: limits.Match{Operations: []string{"/grpc.testing.TestService/UnaryCall"}},
	}}})
	if err != nil {
		panic(err)
	}
	defer ctl.Close()
	// API keys are kept hashed (apikey.Sum; admitctl hash-key).
	ic, err := grpcadmit.New(ctl, grpcadmit.WithKeys(apikey.Table{
		apikey.Sum("sk-acme-example"): {Tenant: "acme", KeyID: "key_acme"},
	}))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Stream))
	testpb.RegisterTestServiceServer(srv, unaryService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer sk-acme-example")
	for i := 1; i <= 3; i++ {
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		wait, hinted := grpcadmit.RetryDelay(err)
		fmt.Println(i, status.Code(err), hinted && wait > 0 && wait <= time.Minute)
	}
	_, err = client.UnaryCall(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "sk-unknown"), &testpb.SimpleRequest{})
	fmt.Println("unknown key:", status.Code(err))
	// Output:
	// 1 OK false
	// 2 OK false
	// 3 ResourceExhausted true
	// unknown key: Unauthenticated
}
