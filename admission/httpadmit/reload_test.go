package httpadmit_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// movingKey returns a policy file in which keyNoisy belongs to tenant
// owner, and the limit of the per-tenant policy tells apart the four
// pairs of tenant and file: in this file (flip false) a's limit is 1M
// and b's 4M; in the other file a's is 3M and b's 2M. The key moves from
// a to b between the two, so a decision by one file's policies for the
// caller as the same file identifies it has limit 1M (the first file) or
// 2M (the second); 3M or 4M is a request decided by the policies of one
// file for the tenant the other file gives the key.
func movingKey(t testing.TB, flip bool) *config.File {
	t.Helper()
	owner, la, lb := "a", 1_000_000, 4_000_000
	if flip {
		owner, la, lb = "b", 3_000_000, 2_000_000
	}
	other := map[string]string{"a": "b", "b": "a"}[owner]
	f, err := config.Parse("moving.yaml", fmt.Appendf(nil, `
policies:
  - {name: rpm, key: [tenant], algorithm: token_bucket, limit: 1, per: 1s}
plans:
  pa: {rpm: {limit: %d}}
  pb: {rpm: {limit: %d}}
tenants:
  %s: {plan: p%s, api_keys: [%s]}
  %s: {plan: p%s}
identity: {anonymous: deny}
`, la, lb, owner, owner, config.HashKey(keyNoisy), other, other))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestApplyIsOneStep reloads, as fast as it can, two files between which
// a key moves from one tenant to another while requests are decided:
// every request is admitted by the policies of the file that identified
// its caller, never by one file's policies for the other's tenant.
func TestApplyIsOneStep(t *testing.T) {
	files := []*config.File{movingKey(t, false), movingKey(t, true)}
	ctl, err := admission.New(files[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpadmit.New(ctl, append(httpadmit.FileOptions(files[0]), httpadmit.WithLogger(slog.New(slog.DiscardHandler)))...)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reloads atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; !stop.Load(); i++ {
			if err := mw.Apply(files[i%2]); err != nil {
				t.Error(err)
				return
			}
			reloads.Add(1)
		}
	}()
	var mu sync.Mutex
	seen, errs := map[int64]int{}, map[string]int{}
	var workers sync.WaitGroup
	for range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for range 5000 {
				r := httptest.NewRequest("GET", "/v1/items", nil)
				r.Header.Set("Authorization", "Bearer "+keyNoisy)
				tk, err := mw.Decide(httptest.NewRecorder(), r)
				var limit int64 = -1
				if err != nil {
					mu.Lock()
					errs[err.Error()]++
					mu.Unlock()
				}
				if err == nil {
					var buf [1]admission.Status
					if sts := tk.Statuses(buf[:0]); len(sts) == 1 {
						limit = sts[0].Limit
					}
					tk.Done()
				}
				mu.Lock()
				seen[limit]++
				mu.Unlock()
			}
		}()
	}
	workers.Wait()
	stop.Store(true)
	wg.Wait()
	for limit, n := range seen {
		if limit != 1_000_000 && limit != 2_000_000 {
			t.Errorf("%d requests decided with limit %d (-1: refused); want 1M or 2M only (the policies and the identity of one file)", n, limit)
		}
	}
	if seen[1_000_000] == 0 || seen[2_000_000] == 0 || reloads.Load() < 10 {
		t.Errorf("decisions by file: %v over %d reloads; want both files to decide requests", seen, reloads.Load())
	}
	t.Logf("decisions by limit %v over %d reloads; errors %v", seen, reloads.Load(), errs)
}
