package shadow_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
)

// A shadow policy runs next to the enforced one; the Recorder says what it
// would do if enforced, and the Log writes each would-reject once.
func Example() {
	rec, err := shadow.NewRecorder(shadow.RecorderConfig{Window: 5 * time.Minute})
	if err != nil {
		panic(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output for the example
			}
			return a
		},
	}))
	log, err := shadow.NewLog(shadow.LogConfig{Burst: 1}, shadow.WithLogger(logger))
	if err != nil {
		panic(err)
	}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{{
		Name: "tenant-rpm-candidate", Key: []limits.KeyPart{limits.KeyTenant}, Mode: limits.Shadow,
		Algorithm: limits.FixedWindow, Limit: 3, Per: time.Minute,
	}}}, admission.WithObserver(shadow.Join(rec, log)),
		admission.WithClock(admissiontest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))))
	if err != nil {
		panic(err)
	}
	for i := range 10 {
		tenant := "small-co"
		if i%2 == 0 {
			tenant = "big-co"
		}
		if tk, err := ctl.Admit(context.Background(), admission.Request{Tenant: tenant}); err == nil {
			tk.Done()
		}
	}
	fmt.Print(rec.Report(3))
	fmt.Println("suppressed log records:", log.Suppressed())
	// Output:
	// level=INFO msg="shadow policy would reject" policy=tenant-rpm-candidate mode=shadow decision=would_reject reason=rate tenant=big-co operation="" model="" cost=1 unit=requests retry_after_s=60 queue_wait_s=0 limit=3 remaining=0 reset_s=60 window_s=60 suppressed=0
	// if enforced now, policy tenant-rpm-candidate would reject 40.0% of requests (4 of 10) over the last 5m0s, 50% of them from tenant big-co
	// suppressed log records: 3
}
