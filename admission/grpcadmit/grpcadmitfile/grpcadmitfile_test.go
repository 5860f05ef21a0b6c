package grpcadmitfile_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/grpcadmit"
	"github.com/sluicehq/sluice/admission/grpcadmit/grpcadmitfile"
	"github.com/sluicehq/sluice/admission/internal/filesetup/filetest"
)

// service answers UnaryCall with the caller's tenant.
type service struct {
	testpb.UnimplementedTestServiceServer
}

func (service) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	id, _ := grpcadmit.IdentityFrom(ctx)
	return &testpb.SimpleResponse{Username: id.Tenant}, nil
}

// step is a call with key and the code it gets.
type step struct {
	key  string
	code codes.Code
}

// policyFile allows each tenant limit UnaryCall calls an hour; keys are
// the API keys of tenant acme.
func policyFile(limit int, keys ...string) string {
	hashes := make([]string, len(keys))
	for i, k := range keys {
		hashes[i] = apikey.Sum(k).String()
	}
	return fmt.Sprintf(`version: 1
policies:
  - name: unary
    key: [tenant]
    algorithm: fixed_window
    limit: %d
    per: 1h
    match: {operations: [/grpc.testing.TestService/UnaryCall]}
tenants:
  acme: {api_keys: [%s]}
identity: {anonymous: deny}
`, limit, strings.Join(hashes, ", "))
}

// One call from the file on disk to interceptors on a real gRPC server
// over loopback: the file's limit and keys apply, an edit applies its
// new limit and key table once the watcher reports it (and says what it
// left out), and a file with a mistake is refused with its line.
func TestFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policies.yaml")
	filetest.Write(t, path, policyFile(1, "sk-one"))
	onReload, events := filetest.Events()
	s, err := grpcadmitfile.FromFile(t.Context(), path, grpcadmitfile.WithLogger(slog.New(slog.DiscardHandler)),
		grpcadmitfile.OnReload(onReload), grpcadmitfile.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	filetest.Applied(t, events, 1)
	ic := s.Interceptor()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary), grpc.ChainStreamInterceptor(ic.Stream))
	testpb.RegisterTestServiceServer(srv, service{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	call := func(key string) codes.Code {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+key)
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		return status.Code(err)
	}
	steps := func(when string, want ...step) {
		t.Helper()
		for i, w := range want {
			if got := call(w.key); got != w.code {
				t.Fatalf("%s, call %d with %s: %v; want %v", when, i+1, w.key, got, w.code)
			}
		}
	}
	steps("at start", step{"sk-one", codes.OK}, step{"sk-one", codes.ResourceExhausted}, step{"sk-two", codes.Unauthenticated})
	filetest.Write(t, path, policyFile(3, "sk-one", "sk-two"))
	filetest.Applied(t, events, 1)
	steps("after the edit", step{"sk-two", codes.OK}, step{"sk-one", codes.OK}, step{"sk-two", codes.ResourceExhausted})

	// An edit allowing anonymous callers is applied whole, its identity
	// section with its limit and keys, in one step.
	filetest.Write(t, path, strings.Replace(policyFile(5, "sk-one"), "anonymous: deny", "anonymous: allow", 1))
	if e := <-events; e.Err != nil || !e.Applied() {
		t.Fatalf("reload allowing anonymous callers: %v; want applied whole", e.Err)
	}
	steps("after allowing anonymous callers", step{"sk-one", codes.OK}, step{"sk-two", codes.Unauthenticated}, step{"", codes.OK})

	w := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(w.Body.String(), `admission_decisions_total{`) {
		t.Errorf("the scrape has no admission_decisions_total:\n%s", w.Body)
	}

	bad := filepath.Join(t.TempDir(), "policies.yaml")
	filetest.Write(t, bad, policyFile(0, "sk-one"))
	if s, err := grpcadmitfile.FromFile(t.Context(), bad); err == nil || !strings.Contains(err.Error(), "policies.yaml:6:") {
		if err == nil {
			s.Close()
		}
		t.Errorf("FromFile(a limit of 0) = %v; want an error at policies.yaml:6", err)
	}
}
