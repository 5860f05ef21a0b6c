package envoyrls_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/internal/pipenet"
)

// epoch is a fixed instant at the start of a day, a minute and a second,
// so that every fixed window starts there.
var epoch = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// rig is one rate limit service on loopback TCP and an official client.
type rig struct {
	t      testing.TB
	clk    *admissiontest.Clock
	ctl    *admission.Controller
	srv    *envoyrls.Server
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	obs    *countingObserver
}

type rigOption struct {
	clock   admission.Clock
	pipes   bool // serve on in-memory connections, for a testing/synctest bubble
	ctlOpts []admission.Option
	srvOpts []envoyrls.Option
}

// start serves cfg on 127.0.0.1 with a fake clock (unless o sets one).
func start(t testing.TB, cfg *rlsconfig.Config, o rigOption) *rig {
	t.Helper()
	r := &rig{t: t, clk: admissiontest.NewClock(epoch), obs: &countingObserver{}}
	clock := admission.Clock(r.clk)
	if o.clock != nil {
		clock = o.clock
	}
	ctlOpts := append([]admission.Option{admission.WithClock(clock), admission.WithObserver(r.obs)}, o.ctlOpts...)
	ctl, err := admission.New(admission.Config{}, ctlOpts...)
	if err != nil {
		t.Fatal(err)
	}
	r.ctl = ctl
	srv, err := envoyrls.New(ctl, cfg, append([]envoyrls.Option{envoyrls.WithClock(clock)}, o.srvOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	if o.pipes {
		r.conn = servePipes(t, srv)
	} else {
		r.conn = serve(t, srv)
	}
	r.client = rlsv3.NewRateLimitServiceClient(r.conn)
	return r
}

// serve serves srv on a loopback port and returns a connection to it.
func serve(t testing.TB, srv *envoyrls.Server) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g, _ := envoyrls.NewGRPCServer(srv)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// servePipes serves srv on in-memory connections and returns a connection
// to it: inside a testing/synctest bubble, the calls' deadlines and the
// server's timers are on the bubble's clock.
func servePipes(t testing.TB, srv *envoyrls.Server) *grpc.ClientConn {
	t.Helper()
	ln := pipenet.Listen()
	g, _ := envoyrls.NewGRPCServer(srv)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient("passthrough:///pipe", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return ln.Dial() }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func mustParse(t testing.TB, yaml string) *rlsconfig.Config {
	t.Helper()
	cfg, err := rlsconfig.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustLoad(t testing.TB, name string) *rlsconfig.Config {
	t.Helper()
	cfg, err := rlsconfig.Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets a descriptor's own hits_addend.
func hits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (r *rig) call(domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	r.t.Helper()
	return r.callReq(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
}

func (r *rig) callReq(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, req)
	if err != nil {
		r.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	if len(resp.Statuses) != len(req.Descriptors) {
		r.t.Fatalf("ShouldRateLimit: %d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
	}
	return resp
}

// outcome returns the overall code and the descriptors' codes, as in
// "OVER_LIMIT: OK OVER_LIMIT".
func outcome(resp *rlsv3.RateLimitResponse) string {
	s := resp.OverallCode.String() + ":"
	for _, st := range resp.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

// countingObserver counts decisions by outcome, and store errors.
type countingObserver struct {
	admission.NopObserver
	outcomes    [admission.NumOutcomes]atomic.Int64
	storeErrors atomic.Int64
}

func (o *countingObserver) Decision(d *admission.Decision) { o.outcomes[d.Outcome].Add(1) }

func (o *countingObserver) StoreError(admission.StoreEvent) { o.storeErrors.Add(1) }

func (o *countingObserver) count(out admission.Outcome) int64 { return o.outcomes[out].Load() }

func writeFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
