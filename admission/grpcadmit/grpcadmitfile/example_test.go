package grpcadmitfile_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/grpcadmit/grpcadmitfile"
)

// From a policy file on disk to a gRPC server's interceptors in one
// call: tenant acme may make two UnaryCall calls an hour.
func ExampleFromFile() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policies.yaml")
	err = os.WriteFile(path, fmt.Appendf(nil, `version: 1
policies:
  - {name: unary, key: [tenant], algorithm: token_bucket, limit: 2, per: 1h,
     match: {operations: [/grpc.testing.TestService/UnaryCall]}}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, apikey.Sum("sk-acme")), 0o600)
	if err != nil {
		panic(err)
	}

	s, err := grpcadmitfile.FromFile(context.Background(), path, grpcadmitfile.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ic := s.Interceptor()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Stream))
	testpb.RegisterTestServiceServer(srv, service{})
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
	for _, key := range []string{"sk-acme", "sk-acme", "sk-acme", "sk-unknown"} {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+key)
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		fmt.Printf("%s %v %q\n", key, status.Code(err), resp.GetUsername())
	}
	// Output:
	// sk-acme OK "acme"
	// sk-acme OK "acme"
	// sk-acme ResourceExhausted ""
	// sk-unknown Unauthenticated ""
}
