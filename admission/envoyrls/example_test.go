package envoyrls_test

import (
	"context"
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/envoyrls"
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
)

// An envoyproxy/ratelimit configuration, served by Sluice: two messages a
// day to any one number. Register srv on a grpc.Server (or use
// NewGRPCServer) and point Envoy's rate_limit_service at it.
func Example() {
	cfg, err := rlsconfig.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 2
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctl, err := admission.New(admission.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := envoyrls.New(ctl, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	req := &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "2061111111"}},
	}}}
	for range 3 {
		resp, err := srv.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit, "remaining", st.LimitRemaining)
	}
	// Output:
	// OK 2 DAY remaining 1
	// OK 2 DAY remaining 0
	// OVER_LIMIT 2 DAY remaining 0
}
