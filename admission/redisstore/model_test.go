package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/redisstore"
	"github.com/sluicehq/sluice/internal/modeltest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestModel runs the model-based test (internal/modeltest) on a real
// redis-server: the same random operations and reference model as in
// memory, the replica's clock standing for the server's (CallerTime) so
// that leases and windows follow the fake clock. Each seed has a store of
// its own; the lease keeper runs from the start for even seeds, is
// stopped from the start for odd ones, and may stop mid-run in any; the
// replica may restart (a new controller on the same store, the old one's
// leases left to expire), and the server may pause (CLIENT PAUSE) and
// die (killed by its pid, started again empty on the same port), with
// the policies failing open, closed or to the in-memory fallback by seed.
// The tolerance each asserts is modeltest's.
func TestModel(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	var pauses, kills int
	for _, seed := range modelSeeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			st, faults := faultyStore(t, srv, client)
			modeltest.Run(t, st, faults, seed, 500, seed%2 == 0)
			pauses += faults.pauses
			kills += faults.kills
		})
	}
	if pauses < 3 || kills < 3 {
		t.Errorf("the seeds paused the server %d times and killed it %d times; want 3 of each at least", pauses, kills)
	}
}

// modelSeeds are TestModel's seeds: the first few, and 20, whose
// pauses let a tenant reach its cap right after a release that failed
// (it fails if the keeper does not retry the release).
var modelSeeds = []uint64{1, 2, 3, 4, 5, 20}

// FuzzModel runs the Redis model-based test for as many seeds as the
// fuzzer tries: go test -run '^$' -fuzz FuzzModel ./admission/redisstore.
func FuzzModel(f *testing.F) {
	f.Add(uint64(1), uint16(500), true)
	srv := redistest.Start(f)
	client := newClient(f, srv.Addr)
	f.Fuzz(func(t *testing.T, seed uint64, ops uint16, keeper bool) {
		st, faults := faultyStore(t, srv, client)
		// A pause costs a second of the wall clock (the store's Timeout):
		// runs of up to 1,000 operations keep an execution short.
		modeltest.Run(t, st, faults, seed, int(ops%1000), keeper)
	})
}

// faultyStore returns a caller-time store on client, and the faults of
// srv for the model. A call the paused server holds fails after the
// store's Timeout, which opens the breaker at once (BreakerFailures 1),
// so that the other calls of a pause fail without waiting; the breaker
// stays open until the pause ends, when the test closes it (the
// cooldown, an hour, never ends it on its own), so no decision depends
// on the wall clock. The Timeout, a second, is twice the default, sized
// for a healthy server under a burst on this machine: the model's calls
// come one at a time.
func faultyStore(t testing.TB, srv *redistest.Server, client redis.UniversalClient) (*redisstore.Store, *serverFaults) {
	st, err := redisstore.New(client, redisstore.Config{
		Prefix: uniquePrefix(), CallerTime: true, Timeout: time.Second,
		BreakerFailures: 1, BreakerCooldown: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, &serverFaults{t: t, srv: srv, st: st}
}

// serverFaults pauses and kills a real redis-server for the model.
type serverFaults struct {
	t             testing.TB
	srv           *redistest.Server
	st            *redisstore.Store
	pauses, kills int
}

func (f *serverFaults) Pause() {
	f.pauses++
	f.srv.Pause(f.t)
}

func (f *serverFaults) Resume() {
	f.srv.Unpause(f.t)
	redisstore.CloseBreaker(f.st)
}

func (f *serverFaults) Kill() {
	f.kills++
	f.srv.Kill()
	f.srv.Restart(f.t)
	redisstore.CloseBreaker(f.st)
}
