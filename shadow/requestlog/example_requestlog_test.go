package requestlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// Write the request log of live traffic: after each request, log it with
// when it arrived, its actual usage and how long its work ran. The log is
// what admitctl replay reads.
func ExampleWriter() {
	path := filepath.Join(os.TempDir(), fmt.Sprintf("requests-%d.jsonl", os.Getpid()))
	defer os.Remove(path)
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctl, _ := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "tenant-concurrency", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 1,
	}}})
	arrived := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // time.Now() in a service
	req := admission.Request{Tenant: "acme", KeyID: "key_e441", Operation: "POST /v1/chat/completions", Model: "gpt-4o", Tokens: 900}
	tk, err := ctl.Admit(context.Background(), req)
	if err == nil {
		_, err2 := ctl.Admit(context.Background(), req) // over the concurrency limit
		var rej *admission.Rejection
		fmt.Println("second request rejected:", errors.As(err2, &rej))
		rl.Log(&req, arrived, admission.Usage{}, 0)
		u := admission.Usage{Tokens: 412, TokensKnown: true}
		tk.Settle(u)
		rl.Log(&req, arrived, u, 1500*time.Millisecond)
	}
	if err := rl.Close(); err != nil {
		fmt.Println(err)
	}
	b, _ := os.ReadFile(path)
	fmt.Print(string(b))
	// Output:
	// second request rejected: true
	// {"time":"2026-01-01T12:00:00Z","tenant":"acme","key_id":"key_e441","operation":"POST /v1/chat/completions","model":"gpt-4o","tokens":900}
	// {"time":"2026-01-01T12:00:00Z","tenant":"acme","key_id":"key_e441","operation":"POST /v1/chat/completions","model":"gpt-4o","tokens":900,"actual":{"tokens":412},"duration":"1.5s"}
}
