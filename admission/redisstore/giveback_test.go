package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/admissiontest"
	"github.com/sluicehq/sluice/admission/backend/backendtest"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// failSettles is a client hook that fails every settle call, alone or in
// a pipeline, while on is set, and counts those it failed.
type failSettles struct {
	on     atomic.Bool
	failed atomic.Int64
}

var errInjected = errors.New("injected failure")

func (h *failSettles) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failSettles) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && redisstore.IsSettleCall(cmd.Args()) {
			h.failed.Add(1)
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}

func (h *failSettles) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			for _, cmd := range cmds {
				if redisstore.IsSettleCall(cmd.Args()) {
					h.failed.Add(1)
					for _, c := range cmds {
						c.SetErr(errInjected)
					}
					return errInjected
				}
			}
		}
		return next(ctx, cmds)
	}
}

// releaseRetries records the outcomes of the controller's release
// retries.
type releaseRetries struct {
	admission.NopObserver
	mu       sync.Mutex
	outcomes []string
}

func (r *releaseRetries) ReleaseRetry(policy, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, policy+" "+outcome)
}

func (r *releaseRetries) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

// TestFailedGiveBackReleased: on a Ring of two servers, a request's
// concurrency lease (keyed by tenant) and its rate limit (keyed by
// operation) live on different servers, so they are taken by two calls;
// when the rate limit refuses, the lease taken is given back, and that
// give-back fails. The lease is then released by the controller's
// retries once the server answers again, long before its MaxHold (an
// hour). Before, the store forgot the lease when its give-back failed:
// nothing retried it, and the tenant's permit stayed held for a whole
// MaxHold.
func TestFailedGiveBackReleased(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	hook := &failSettles{}
	client := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"a": a.Addr, "b": b.Addr},
		ContextTimeoutEnabled: true,
		NewClient: func(opt *redis.Options) *redis.Client {
			c := redis.NewClient(opt)
			c.AddHook(hook)
			return c
		},
	})
	t.Cleanup(func() { client.Close() })
	const op = "chat"
	shardOf := func(tag string) string {
		c, err := client.GetShardClientForKey("{" + tag + "}")
		if err != nil {
			t.Fatal(err)
		}
		return c.Options().Addr
	}
	tenant := ""
	for i := 0; i < 64 && tenant == ""; i++ {
		if c := fmt.Sprint("t", i); shardOf(c) != shardOf(op) {
			tenant = c
		}
	}
	if tenant == "" {
		t.Fatal("no tenant on the other server than the operation")
	}
	prefix := uniquePrefix()
	st := newStore(t, client, redisstore.Config{Prefix: prefix, CallerTime: true, Timeout: 10 * time.Second})
	clock := admissiontest.NewClock(backendtest.Epoch)
	obs := &releaseRetries{}
	ctl, err := admission.New(admission.Config{Policies: []admission.Policy{
		{Name: "perop", Key: []limits.KeyPart{limits.KeyOperation}, Algorithm: limits.TokenBucket, Limit: 1, Per: time.Hour, Store: "redis"},
		{Name: "inflight", Key: []limits.KeyPart{limits.KeyTenant}, Algorithm: limits.Concurrency, Limit: 10, MaxHold: time.Hour, Store: "redis"},
	}}, admission.WithStore("redis", st), admission.WithClock(clock), admission.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close() })
	req := admission.Request{Tenant: tenant, Operation: op}
	tk, err := ctl.Admit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	tk.Done()

	lease := fmt.Sprintf("%s{%s}:inflight:cl:%s", prefix, tenant, tenant)
	leaseHeld := func() bool {
		n, err := redistest.Do(shardOf(tenant), "EXISTS", lease)
		if err != nil {
			t.Fatal(err)
		}
		return n == "1"
	}
	if leaseHeld() {
		t.Fatal("lease held after the first request was done")
	}
	hook.on.Store(true)
	_, err = ctl.Admit(context.Background(), req)
	var rej *admission.Rejection
	if !errors.As(err, &rej) || rej.Policy != "perop" {
		t.Fatalf("second Admit = %v; want perop's refusal", err)
	}
	if hook.failed.Load() == 0 {
		t.Fatal("no settle call failed: the lease was not given back by a call of its own")
	}
	if !leaseHeld() {
		t.Fatal("lease not held after its give-back failed: the test does not test the failure")
	}
	if got := obs.seen(); !slices.Equal(got, []string{"inflight retrying"}) {
		t.Fatalf("release retries %q after the refusal; want the lease's release queued", got)
	}
	hook.on.Store(false)
	clock.Advance(time.Second) // the controller's retries come due
	poll.Until(t, 5*time.Second, "the lease released by a retry", func() bool { return !leaseHeld() && len(obs.seen()) == 2 })
	if got := obs.seen(); !slices.Equal(got, []string{"inflight retrying", "inflight landed"}) {
		t.Errorf("release retries %q; want the queued release landed", got)
	}
}
