package rlsconfig_test

import (
	"fmt"

	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
)

// An envoyproxy/ratelimit configuration becomes one admission policy per
// limit; a request descriptor is matched most specifically, level by level.
func Example() {
	cfg, err := rlsconfig.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range cfg.Policies {
		fmt.Println(p.Name, p.Algorithm, p.Limit, p.Per)
	}
	entries := []rlsconfig.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}}
	l, _ := cfg.Domain("messaging").Match(entries)
	fmt.Printf("%s: partition %q\n", l.Policy, l.Partition(entries))
	_, found := cfg.Domain("messaging").Match([]rlsconfig.Entry{{Key: "from_number", Value: "1"}})
	fmt.Println("from_number matched:", found)
	// Output:
	// messaging/message_type=marketing/to_number fixed_window 5 24h0m0s
	// messaging/to_number fixed_window 100 24h0m0s
	// messaging/message_type=marketing/to_number: partition "2061111111"
	// from_number matched: false
}
