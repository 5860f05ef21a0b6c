package replay_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/replay"
)

// Replay a request log through the limit in force and a stricter
// candidate tried in shadow: the candidate's would-reject counts are
// what enforcing it would have rejected. The first request's refund (it
// used 400 of the 900 tokens reserved) is applied when it ends, at 2s.
func ExampleRun() {
	log := `{"time":"2026-01-01T12:00:00.000Z","tenant":"acme","operation":"POST /v1/chat/completions","tokens":900,"actual":{"tokens":400},"duration":"2s"}
{"time":"2026-01-01T12:00:00.100Z","tenant":"acme","operation":"POST /v1/chat/completions","tokens":900,"duration":"2s"}
{"time":"2026-01-01T12:00:00.200Z","tenant":"acme","operation":"POST /v1/chat/completions","tokens":900,"duration":"1s"}
{"time":"2026-01-01T12:00:00.300Z","tenant":"globex","operation":"POST /v1/chat/completions","tokens":300}
{"time":"2026-01-01T12:00:03.000Z","tenant":"acme","operation":"POST /v1/chat/completions","tokens":900}
`
	tpm := func(limit int64, mode limits.Mode) admission.Policy {
		return admission.Policy{
			Name: "tenant-tpm", Key: []limits.KeyPart{limits.KeyTenant}, Unit: limits.UnitTokens,
			Algorithm: limits.SlidingWindow, Limit: limit, Per: time.Minute, Mode: mode,
		}
	}
	rep, err := replay.Run(context.Background(), strings.NewReader(log), replay.Config{},
		replay.Candidate{Name: "current", Config: admission.Config{Policies: []admission.Policy{tpm(3000, limits.Enforce)}}},
		replay.Candidate{Name: "stricter", Config: admission.Config{Policies: []admission.Policy{
			tpm(2000, limits.Shadow),
			{Name: "tenant-concurrency", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 2, Mode: limits.Shadow},
		}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	rep.WriteText(os.Stdout)
	// Output:
	// replayed 5 requests over 3s through 2 candidate(s)
	//
	// CANDIDATE  POLICY              MODE     MATCHED  ADMITTED  REJECTED  WOULD_REJECT  REFUSED%  REFUSED_TOKENS  PEAK_IN_FLIGHT
	// current    *                   -        5        4         1         0             20.0%     -               4
	// current    tenant-tpm          enforce  5        4         1         0             20.0%     900             4
	// stricter   *                   -        5        5         0         2             40.0%     -               4
	// stricter   tenant-concurrency  shadow   5        4         0         1             20.0%     900             3
	// stricter   tenant-tpm          shadow   5        3         0         2             40.0%     1800            3
	// (no record estimates cost: its column is left out)
	//
	// top tenants by refusals (refused of their requests, share of the policy's refusals):
	//   current tenant-tpm: acme 1/4 (100.0%)
	//   stricter tenant-concurrency: acme 1/4 (100.0%)
	//   stricter tenant-tpm: acme 2/4 (100.0%)
}
