package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/backend"
	"github.com/sluicehq/sluice/admission/limits"
)

// Defaults applied to zero Config fields.
//
// DefaultTimeout is sized so that a healthy Redis never fails a call, so
// that a policy fails open (or closed) only when its store is really
// failing: a burst of 200 concurrent decisions from two replicas, under
// the race detector, on a 2-core machine shared with other builds, met
// round trips of up to about 100ms (TestBurstNeverFailsOpen); a healthy
// server answers in a fraction of a millisecond.
const (
	DefaultPrefix          = "sluice:"
	DefaultTimeout         = 500 * time.Millisecond
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = time.Second
	DefaultIdleGrace       = time.Second
	DefaultName            = "redis"
	DefaultStatsEvery      = 15 * time.Second
	DefaultStatsKeys       = 10_000
)

// ErrBreakerOpen is returned (wrapped) without calling Redis while the
// circuit breaker is open after repeated failures.
var ErrBreakerOpen = errors.New("redisstore: circuit breaker open")

// Config configures a Store. Zero fields take the defaults above.
type Config struct {
	// Prefix starts every key the store writes; default DefaultPrefix. It
	// must not contain '{' or '}', which delimit the hash tag that follows.
	Prefix string
	// Timeout bounds the server's answer to each call (one round trip);
	// default DefaultTimeout. A call queued behind the round trips on
	// their way (see the package documentation) has Timeout to be sent,
	// then Timeout for its answer, both within its context's deadline.
	// A call that takes longer fails, and the policy's OnStoreError
	// decides the request.
	Timeout time.Duration
	// BreakerFailures opens the circuit breaker when that many of the
	// last 2×BreakerFailures round trips to Redis failed (at most 32 of
	// 64); default DefaultBreakerFailures. A pipeline of calls is one
	// round trip, so one slow answer to a burst counts once.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker fails calls at once,
	// without a network call, before it lets one probe call through;
	// default DefaultBreakerCooldown. A successful probe closes it.
	BreakerCooldown time.Duration
	// IdleGrace is added to the expiry of every key beyond the moment its
	// state becomes neutral; default DefaultIdleGrace.
	IdleGrace time.Duration
	// StatsEvery is the least time between two counts of a policy's
	// partitions in Redis for Stats (a scrape), by the controller's
	// clock; default DefaultStatsEvery. A scrape sooner gets the last
	// count.
	StatsEvery time.Duration
	// StatsKeys bounds the keys one count reads, per policy; default
	// DefaultStatsKeys. A policy with more partitions reports StatsKeys
	// of them (see Stats).
	StatsKeys int
	// Name is the store's name in observer events; default DefaultName. Use
	// the name the store is registered under with admission.WithStore.
	Name string
	// CallerTime makes the scripts use the instant passed to each call
	// instead of Redis TIME. It exists for tests that replay fixed instants
	// (the conformance suite); with several replicas it would let their
	// clocks disagree, so never set it in production.
	CallerTime bool
}

// An Option configures a Store's collaborators.
type Option func(*Store)

// WithObserver sets the observer the store reports to: if it implements
// backend.CallObserver (as the metrics observer does) it receives
// the latency and outcome of every Redis call, and if it implements
// BreakerObserver the breaker's state changes. Failed decisions and
// settlements are reported by the controller (StoreError).
func WithObserver(o admission.Observer) Option { return func(s *Store) { s.obs = o } }

// WithClock sets the clock the circuit breaker's cooldown is measured on;
// the default is admission.SystemClock. Tests pass a fake clock (package
// admissiontest) to open and close the breaker at chosen instants. The
// deadlines of calls to Redis are the network's, on the real clock, and
// decisions use the server's time (see Time in the package documentation).
func WithClock(c admission.Clock) Option { return func(s *Store) { s.clock = c } }

// Call describes one Redis call of a store: Op is "acquire", "batch",
// "settle", "renew" or "ratio" (LearnRatio); Duration is zero when the
// breaker refused the call.
type Call = backend.Call

// A BreakerObserver is an observer that also wants the breaker's state
// changes.
type BreakerObserver interface {
	// BreakerChanged is called when the breaker opens (open true) after
	// repeated failures, and when it closes again.
	BreakerChanged(store string, open bool)
}

// Store keeps limiter state in Redis so that every replica of a service
// enforces one limit. It implements backend.Store and backend.Batcher.
// It is safe for concurrent use. Its only goroutines send the calls that
// queue for a node while another is on its way (see groupQueue), and end
// when none waits.
type Store struct {
	client  redis.UniversalClient
	cfg     Config
	sharded bool // Cluster or Ring: a batch's keys must share a hash tag
	obs     admission.Observer
	clock   admission.Clock // the breaker's
	calls   backend.CallObserver
	breaks  BreakerObserver
	brk     *breaker
	openErr error // what the open breaker answers: made once, as it refuses calls at full speed
	grace   int64 // ms
	idemMS  int64 // lifetime of a settle's idempotency key
	pool    sync.Pool
	group   groupQueue // a single node's, or when a key's node is unknown
	nodes   sync.Map   // *redis.Client (a Cluster master, a Ring shard) -> *groupQueue
}

var (
	_ backend.Store   = (*Store)(nil)
	_ backend.Batcher = (*Store)(nil)
	_ backend.Renewer = (*limiter)(nil)
)

// New returns a Store on client: a *redis.Client (single node or
// Sentinel failover), a *redis.ClusterClient or a *redis.Ring. The client
// must honour context deadlines (ContextTimeoutEnabled in its options), so
// that Config.Timeout bounds every call; New refuses one that does not.
func New(client redis.UniversalClient, cfg Config, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", cfg.Prefix)
	}
	if cfg.Timeout < 0 || cfg.BreakerFailures < 0 || cfg.BreakerCooldown < 0 || cfg.IdleGrace < 0 || cfg.StatsEvery < 0 || cfg.StatsKeys < 0 {
		return nil, errors.New("redisstore: negative timeout, breaker, grace or statistics setting")
	}
	if cfg.StatsEvery == 0 {
		cfg.StatsEvery = DefaultStatsEvery
	}
	if cfg.StatsKeys == 0 {
		cfg.StatsKeys = DefaultStatsKeys
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = DefaultBreakerFailures
	}
	if cfg.BreakerCooldown == 0 {
		cfg.BreakerCooldown = DefaultBreakerCooldown
	}
	if cfg.IdleGrace == 0 {
		cfg.IdleGrace = DefaultIdleGrace
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if !honoursDeadlines(client) {
		return nil, errors.New("redisstore: the client ignores context deadlines, so the store's Timeout could not bound its calls: " +
			"set ContextTimeoutEnabled: true in the client's options")
	}
	s := &Store{client: client, cfg: cfg, obs: admission.NopObserver{}, clock: admission.SystemClock{}}
	for _, o := range opts {
		o(s)
	}
	s.calls, _ = s.obs.(backend.CallObserver)
	s.breaks, _ = s.obs.(BreakerObserver)
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		s.sharded = true
	}
	s.brk = newBreaker(cfg.BreakerFailures, cfg.BreakerCooldown, s.clock, func(open bool) {
		if s.breaks != nil {
			s.breaks.BreakerChanged(s.cfg.Name, open)
		}
	})
	s.openErr = fmt.Errorf("%w (%d of the last %d round trips failed)", ErrBreakerOpen, s.brk.threshold, 2*s.brk.threshold)
	s.grace = cfg.IdleGrace.Milliseconds()
	s.idemMS = max(int64(1000), 4*cfg.Timeout.Milliseconds())
	s.pool.New = func() any { return &call{done: make(chan struct{}, 1)} }
	return s, nil
}

// honoursDeadlines reports whether client bounds network I/O by the
// context's deadline (go-redis does only with ContextTimeoutEnabled).
// Clients of other types are trusted.
func honoursDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Limiter returns the limiter of policy p. Its keys are named after the
// policy and its algorithm, so a policy that changes algorithm starts from
// fresh state.
func (s *Store) Limiter(p *admission.Policy) (backend.Limiter, error) {
	if p.Algorithm > limits.Quota {
		return nil, fmt.Errorf("redisstore: policy %q: unknown algorithm %d", p.Name, p.Algorithm)
	}
	l := &limiter{
		s: s, policy: p.Name, alg: p.Algorithm,
		infix: ":" + p.Name + ":" + algCode[p.Algorithm] + ":",
	}
	if p.Algorithm == limits.FixedWindow {
		l.full = &fullWindows{seed: maphash.MakeSeed()}
	}
	return l, nil
}

// fullWindows remembers, per partition and window, that the last take of
// a fixed window's partition on this replica did not fit: the next take
// of the partition in that window reads the count before it increments
// it (and increments it only if the take fits), so that a flood of
// refused requests writes nothing to Redis, its append-only file or its
// replicas. It is a direct-mapped table of fingerprints, of a fixed size
// whatever the number of partitions: a collision or a stale entry only
// changes which of the two ways a take is made, never its answer, which
// the script decides from the count either way.
type fullWindows struct {
	seed  maphash.Seed
	slots [fullSlots]atomic.Uint64
}

// fullSlots is the size of a fixed window policy's table (8 KiB).
const fullSlots = 1024

// fingerprint returns the nonzero fingerprint of a partition's window.
func (f *fullWindows) fingerprint(key string, window int64) uint64 {
	return (maphash.String(f.seed, key) ^ uint64(window)*0x9e3779b97f4a7c15) | 1
}

// has reports whether the window of fingerprint h was full.
func (f *fullWindows) has(h uint64) bool { return f.slots[h%fullSlots].Load() == h }

// mark records whether the window of fingerprint h is full, writing the
// table only when that changes.
func (f *fullWindows) mark(h uint64, full bool) {
	slot := &f.slots[h%fullSlots]
	switch {
	case full && slot.Load() != h:
		slot.Store(h)
	case !full && slot.Load() == h:
		slot.CompareAndSwap(h, 0)
	}
}

// markFull records in the fixed windows of ops, just acquired at now,
// which did not fit (a take of more than the limit never fits, and says
// nothing of the count).
func markFull(ops []backend.Op, now int64) {
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if l.alg != limits.FixedWindow || op.N <= 0 {
			continue
		}
		full := !op.Grant.OK && op.N <= op.Limit.Amount
		l.full.mark(l.full.fingerprint(op.Key, floorTo(now, int64(op.Limit.Per))), full)
	}
}

var algCode = [...]string{
	limits.TokenBucket:   "tb",
	limits.FixedWindow:   "fc", // its earlier layout (one packed key per partition) was named fw
	limits.SlidingWindow: "sw",
	limits.SlidingLog:    "sl",
	limits.Concurrency:   "cl", // its earlier text layout was named cc
	limits.Quota:         "q",
}

// limiter is one policy's view of the store.
type limiter struct {
	s      *Store
	policy string
	alg    limits.Algorithm
	infix  string
	// held is the cost of the concurrency leases this replica took and
	// has not released (nor found expired), but for those whose release
	// failed, which are in stuck until a release lands or their lease
	// would have expired: together, its in-flight work, as Stats reports
	// it.
	held    atomic.Int64
	nstuck  atomic.Int32
	stuckMu sync.Mutex
	stuck   map[int64]stuckLease // by lease id (Grant.Stamp)
	scan    partScan             // the partitions, counted for Stats
	full    *fullWindows         // a fixed window's partitions found full
}

// stuckLease is a lease whose release failed: held in Redis until a
// retry lands or it expires.
type stuckLease struct {
	cost  int64
	until time.Time // by this replica's clock: MaxHold after the failure, at most
}

var _ backend.Inspector = (*limiter)(nil)

// OnEvict implements backend.Inspector: Redis expires idle partitions on
// its own, so f is never called.
func (l *limiter) OnEvict(func(partitions, leases int)) {}

// tookLeases counts in the limiters' held figure the leases that ops,
// just acquired, took.
func tookLeases(ops []backend.Op) {
	for i := range ops {
		if l := ops[i].Limiter.(*limiter); l.alg == limits.Concurrency && ops[i].Grant.OK && ops[i].Grant.Stamp != 0 {
			l.held.Add(ops[i].Grant.Taken)
		}
	}
}

// releasedLeases takes out of the limiters' figures the leases that ops,
// just settled, released.
func releasedLeases(ops []backend.Op) {
	for i := range ops {
		if l := ops[i].Limiter.(*limiter); l.alg == limits.Concurrency && settles(l, &ops[i]) {
			if l.nstuck.Load() == 0 || !l.unstick(ops[i].Grant.Stamp) {
				l.held.Add(-ops[i].Grant.Taken)
			}
		}
	}
}

// unstick removes the lease id from the stuck ones, and reports whether
// it was one.
func (l *limiter) unstick(id int64) bool {
	l.stuckMu.Lock()
	defer l.stuckMu.Unlock()
	if _, ok := l.stuck[id]; !ok {
		return false
	}
	delete(l.stuck, id)
	l.nstuck.Add(-1)
	return true
}

// failedReleases moves the leases whose release in ops failed from the
// limiters' held figure to their stuck ones, until a retry lands or
// their lease would have expired (those expired are dropped on the way).
func failedReleases(ops []backend.Op, now time.Time) {
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if l.alg != limits.Concurrency || !settles(l, op) {
			continue
		}
		l.stuckMu.Lock()
		if l.stuck == nil {
			l.stuck = make(map[int64]stuckLease)
		}
		for id, sl := range l.stuck {
			if !now.Before(sl.until) {
				delete(l.stuck, id)
				l.nstuck.Add(-1)
			}
		}
		if _, again := l.stuck[op.Grant.Stamp]; !again {
			l.stuck[op.Grant.Stamp] = stuckLease{cost: op.Grant.Taken, until: now.Add(time.Duration(maxHold(&op.Limit)))}
			l.nstuck.Add(1)
			l.held.Add(-op.Grant.Taken)
		}
		l.stuckMu.Unlock()
	}
}

var _ backend.Limiter = (*limiter)(nil)

// Tag returns the hash tag of a partition key: its first part (up to the
// first 0x1f separator the controller puts between key fields), so the
// partitions of one request under policies keyed by the same leading field
// (tenant, for example) share a Cluster slot. An empty tag, or one that
// starts with '}', is prefixed with '~' so that Redis hashes the tag and not
// the whole key.
func Tag(key string) string {
	if i := strings.IndexByte(key, backend.KeySeparator); i >= 0 {
		key = key[:i]
	}
	if key == "" || key[0] == '}' {
		return "~" + key
	}
	return key
}

// appendKey appends to dst the Redis key of partition key, for the
// algorithms that keep a partition in one key.
func (l *limiter) appendKey(dst []byte, key string) []byte { return l.appendSubKey(dst, "", key) }

// appendSubKey appends to dst the Redis key sub of partition key: "" for
// the one key of a partition, "h:" and "z:" for a sliding log's two.
func (l *limiter) appendSubKey(dst []byte, sub, key string) []byte {
	dst = append(dst, l.s.cfg.Prefix...)
	dst = append(dst, '{')
	dst = append(dst, Tag(key)...)
	dst = append(dst, '}')
	dst = append(dst, l.infix...)
	dst = append(dst, sub...)
	return append(dst, key...)
}

// appendSettleKey appends a new idempotency key in the slot of tag: it
// makes a settle that the client retries (after a lost reply) apply once.
func (s *Store) appendSettleKey(dst []byte, tag string) []byte {
	dst = append(dst, s.cfg.Prefix...)
	dst = append(dst, '{')
	dst = append(dst, tag...)
	dst = append(dst, "}:settle:"...)
	return strconv.AppendUint(dst, rand.Uint64(), 36)
}

// call is a reusable argument buffer for one script call.
type call struct {
	keys []string
	args []any
	cmd  []any // the command: see command
	blob blob  // the script's argument
	// The keys are built in kbuf, ending at kend, and made
	// strings with one allocation (flushKeys).
	kbuf []byte
	kend []int
	// In a group queue (see groupQueue): the script, the deadline, the
	// outcome, and done, which receives once when the outcome is set (the
	// call is recycled with it empty); timer, kept across uses, is a
	// queued call's deadline.
	script   *script
	start    time.Time // when it was sent, or made by its caller until then
	deadline time.Time // to be sent while queued; for its answer once sent
	// callerDeadline is its caller's context's deadline (zero if none).
	callerDeadline time.Time
	sent           bool // taken out of the queue into a batch
	reply          string
	err            error
	done           chan struct{}
	timer          *time.Timer
	probe          uint64 // the breaker's ticket when it is its probe (see breaker.allow)
	detached       bool   // once sent, not cancelled by its caller (a settlement)
	finished       bool   // done is closed
	gone           bool   // left while its batch was sent: the sender recycles it
}

// putKey appends a key, written by add, for flushKeys.
func (c *call) putKey(add func([]byte) []byte) {
	c.kbuf = add(c.kbuf)
	c.kend = append(c.kend, len(c.kbuf))
}

// flushKeys appends the keys of putKey to c.keys.
func (c *call) flushKeys() {
	all, start := string(c.kbuf), 0
	for _, end := range c.kend {
		c.keys = append(c.keys, all[start:end])
		start = end
	}
}

// command returns the command calling a script with c's keys and
// arguments: verb EVALSHA with the script's hash, or EVAL with its source.
// The keys go in as pointers into c.keys, which the client reads as it
// reads a string (for the command and for routing it): a string in an
// interface would cost an allocation per key, a pointer costs none. c is
// not recycled, nor its keys changed, while its command is on its way.
func (c *call) command(verb, script any) []any {
	c.cmd = append(c.cmd[:0], verb, script, len(c.keys))
	for i := range c.keys {
		c.cmd = append(c.cmd, &c.keys[i])
	}
	c.cmd = append(c.cmd, c.args...)
	return c.cmd
}

func (s *Store) getCall() *call { return s.pool.Get().(*call) }

func (s *Store) putCall(c *call) {
	clear(c.keys)
	clear(c.args)
	clear(c.cmd)
	c.keys, c.args, c.cmd, c.blob.b, c.kbuf, c.kend = c.keys[:0], c.args[:0], c.cmd[:0], c.blob.b[:0], c.kbuf[:0], c.kend[:0]
	c.script, c.deadline, c.reply, c.err = nil, time.Time{}, "", nil
	c.start, c.callerDeadline = time.Time{}, time.Time{}
	c.detached, c.finished, c.gone, c.sent, c.probe = false, false, false, false, 0
	s.pool.Put(c)
}

// split returns the seconds and nanoseconds of an instant, flooring.
func split(ns int64) (int64, int64) {
	sec := ns / 1e9
	rem := ns - sec*1e9
	if rem < 0 {
		sec--
		rem += 1e9
	}
	return sec, rem
}

func floorTo(ns, per int64) int64 {
	start := ns - ns%per
	if ns < 0 && ns%per != 0 {
		start -= per
	}
	return start
}

// quotaPeriod returns the start (seconds and nanoseconds) and length of
// the quota period holding now, and 1 when it is a calendar period (which
// the script checks against its own time instead of moving it).
func quotaPeriod(l *limits.Limit, now int64) (ps, pn, length, calendar int64) {
	start, end := limits.QuotaPeriod(l, now)
	ps, pn = split(start)
	if l.Period == limits.PeriodDay || l.Period == limits.PeriodMonth {
		calendar = 1
	}
	return ps, pn, end - start, calendar
}

func nowNanos(now time.Time) int64 {
	if now.IsZero() {
		now = time.Now()
	}
	return now.UnixNano()
}

// Acquire implements backend.Limiter with one script call.
func (l *limiter) Acquire(ctx context.Context, key string, lim *limits.Limit, n int64, now time.Time, g *backend.Grant) error {
	var ops [1]backend.Op
	ops[0] = backend.Op{Limiter: l, Key: key, Limit: *lim, N: n}
	err := l.s.acquire(ctx, "acquire", ops[:], nowNanos(now))
	*g = ops[0].Grant
	return err
}

// AcquireBatch implements backend.Batcher: one script evaluates every op
// atomically when their keys can share a script (always on a single node;
// on Cluster and Ring when their hash tags are equal, see Tag). Otherwise
// the ops are evaluated in groups of equal tags and the groups that took
// permits are given back when an enforcing op did not fit; a lease whose
// give-back failed stays in its op's grant, for the caller to release.
func (s *Store) AcquireBatch(ctx context.Context, ops []backend.Op, now time.Time) error {
	for i := range ops {
		if l, ok := ops[i].Limiter.(*limiter); !ok || l.s != s {
			return fmt.Errorf("redisstore: op %d: limiter %T is not from this store", i, ops[i].Limiter)
		}
	}
	ns := nowNanos(now)
	if len(ops) == 1 {
		return s.acquire(ctx, "acquire", ops, ns)
	}
	if !s.sharded || sameTag(ops) {
		return s.acquire(ctx, "batch", ops, ns)
	}
	groups := groupByTag(ops)
	var err error
	done := make([]bool, len(groups))
	for gi, g := range groups {
		sub := make([]backend.Op, len(g))
		for i, j := range g {
			sub[i] = ops[j]
		}
		if err = s.acquire(ctx, "batch", sub, ns); err != nil {
			break
		}
		for i, j := range g {
			ops[j].Grant = sub[i].Grant
		}
		done[gi] = true
	}
	fits := err == nil
	for i := range ops {
		if !ops[i].Shadow && !ops[i].Grant.OK {
			fits = false
		}
	}
	if fits {
		return nil
	}
	// Give back what the committed groups took.
	var back []backend.Op
	var idx []int
	for gi, g := range groups {
		if !done[gi] {
			continue
		}
		for _, j := range g {
			op := ops[j]
			if !op.Grant.OK {
				continue
			}
			l := op.Limiter.(*limiter)
			switch {
			case l.alg == limits.Concurrency && op.Grant.Stamp != 0:
				op.Release = true
			case l.alg != limits.Concurrency && op.Grant.Taken != 0:
				op.N = -op.Grant.Taken
			default:
				continue
			}
			back = append(back, op)
			idx = append(idx, j)
		}
	}
	if len(back) > 0 {
		_ = s.SettleBatch(context.WithoutCancel(ctx), back, now)
	}
	for k, j := range idx {
		if ops[j].Limiter.(*limiter).alg == limits.Concurrency {
			if back[k].Err != nil {
				// The lease is still held: the grant keeps it, so the
				// caller's rollback releases it, and retries until it
				// lands or the lease expires (a release is applied once
				// however often it is sent).
				continue
			}
			ops[j].Grant.Stamp = 0
		}
		// A refund that failed is not sent again: if it was applied
		// and only its answer lost, a second would give back twice.
		ops[j].Grant.Taken = 0
	}
	return err
}

func sameTag(ops []backend.Op) bool {
	t := Tag(ops[0].Key)
	for i := 1; i < len(ops); i++ {
		if Tag(ops[i].Key) != t {
			return false
		}
	}
	return true
}

// groupByTag returns the indexes of ops grouped by hash tag, in order of
// first appearance.
func groupByTag(ops []backend.Op) [][]int {
	var groups [][]int
	var tags []string
	for i := range ops {
		t := Tag(ops[i].Key)
		found := false
		for g := range tags {
			if tags[g] == t {
				groups[g] = append(groups[g], i)
				found = true
				break
			}
		}
		if !found {
			tags = append(tags, t)
			groups = append(groups, []int{i})
		}
	}
	return groups
}

// acquire evaluates ops, whose keys may share a script, in one call (name
// is "acquire" for one op, "batch" for several) and fills their grants.
func (s *Store) acquire(ctx context.Context, name string, ops []backend.Op, now int64) error {
	if len(ops) == 0 {
		return nil
	}
	if s.brk.refusing() {
		// Refused before its keys are built: nothing allocated.
		return s.refused(ctx, name, len(ops))
	}
	var kb [chunkMax]byte
	sc := acquireScripts.get(scriptKey(kb[:0], ops, false))
	reply, err := retry(now, true, func(now int64, _ bool) (string, error) {
		return s.run(ctx, sc, name, len(ops), s.acquireCall(ops, now))
	})
	if err != nil {
		return err
	}
	if err := grants(ops, reply); err != nil {
		return err
	}
	tookLeases(ops)
	markFull(ops, now)
	return nil
}

func dur(v int64) time.Duration {
	if v >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return time.Duration(v)
}

// retry makes an acquire or settle call with send, from the instant now
// and with an idempotency key when keyed, and makes it again while the
// reply asks: 'S' and the server's instant says a window or quota period,
// computed from the caller's clock, does not hold the server's time, so
// the call is made again from the server's instant (three attempts at
// most); "K" says a settle needs the idempotency key it was not sent, so
// the call is made again with one. An error ends the calls. (Each call
// deals with a server that does not have its script: see Store.eval.)
func retry(now int64, keyed bool, send func(now int64, keyed bool) (string, error)) (string, error) {
	for attempt := 0; ; attempt++ {
		reply, err := send(now, keyed)
		switch {
		case err != nil:
			return "", err
		case reply == "K" && !keyed:
			keyed = true
		case len(reply) == 17 && reply[0] == 'S':
			if attempt >= 2 {
				return "", errors.New("redisstore: window or quota period keeps moving")
			}
			r := floats{s: reply[1:]}
			now = r.int() * 1e9
			now += r.int()
		default:
			return reply, nil
		}
	}
}

// Adjust implements backend.Limiter: one script call, none when delta is
// zero or the policy is a concurrency limit (whose permits are released
// whole).
func (l *limiter) Adjust(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, delta int64, now time.Time) error {
	if delta == 0 || l.alg == limits.Concurrency {
		return nil
	}
	var ops [1]backend.Op
	ops[0] = backend.Op{Limiter: l, Key: key, Limit: *lim, N: delta, Grant: *g}
	err := l.s.settle(ctx, ops[:], nowNanos(now))
	*g = ops[0].Grant
	return err
}

// Release implements backend.Limiter: one script call for a concurrency
// grant that holds a lease, none otherwise. Releasing twice is harmless.
func (l *limiter) Release(ctx context.Context, key string, lim *limits.Limit, g *backend.Grant, now time.Time) error {
	if l.alg != limits.Concurrency || g.Stamp == 0 {
		return nil
	}
	var ops [1]backend.Op
	ops[0] = backend.Op{Limiter: l, Key: key, Limit: *lim, Release: true, Grant: *g}
	return l.s.settle(ctx, ops[:], nowNanos(now))
}

// SettleBatch implements backend.Batcher: the adjustments and releases of
// ops in one script call (one per hash tag on Cluster when the tags
// differ). Ops with nothing to do (N zero and no lease to release) cost
// nothing, and a batch of only such ops makes no call at all.
func (s *Store) SettleBatch(ctx context.Context, ops []backend.Op, now time.Time) error {
	work := 0
	for i := range ops {
		l, ok := ops[i].Limiter.(*limiter)
		if !ok || l.s != s {
			return fmt.Errorf("redisstore: op %d: limiter %T is not from this store", i, ops[i].Limiter)
		}
		if settles(l, &ops[i]) {
			work++
		}
	}
	if work == 0 {
		return nil
	}
	ns := nowNanos(now)
	if !s.sharded || sameTag(ops) {
		return s.settle(ctx, ops, ns)
	}
	var errs []error
	for _, g := range groupByTag(ops) {
		sub := make([]backend.Op, len(g))
		for i, j := range g {
			sub[i] = ops[j]
		}
		if err := s.settle(ctx, sub, ns); err != nil {
			errs = append(errs, err)
		}
		for i, j := range g {
			ops[j].Grant, ops[j].Err = sub[i].Grant, sub[i].Err
		}
	}
	return errors.Join(errs...)
}

// settles reports whether op has work for the settle script.
func settles(l *limiter, op *backend.Op) bool {
	if l.alg == limits.Concurrency {
		return op.Release && op.Grant.Stamp != 0
	}
	return op.N != 0
}

// settle runs the settle script over the ops that have work.
func (s *Store) settle(ctx context.Context, ops []backend.Op, now int64) error {
	count, hold, adjusts := 0, int64(-1), false
	var t0 int64
	var tag string
	for i := range ops {
		op := &ops[i]
		l := op.Limiter.(*limiter)
		if !settles(l, op) {
			continue
		}
		count++
		switch {
		case l.alg == limits.Concurrency:
			if hold < 0 {
				hold = maxHold(&op.Limit)
			}
		case !adjusts:
			adjusts, tag = true, Tag(op.Key)
			fallthrough
		default:
			if l.alg == limits.TokenBucket && t0 == 0 {
				t0 = op.Grant.Stamp
			}
		}
	}
	if count == 0 {
		return nil
	}
	clock, idem, mark, keyed := clockServer, int64(0), int64(0), false
	if !adjusts {
		// Releases only: no time, nothing to apply twice.
		clock = clockUnneeded
	} else {
		idem = s.idemMS
		if t0 != 0 && hold >= 0 && count <= chunkMax {
			mark = 1
		}
		// Unless the lease marks the settle, the script needs an
		// idempotency key: send one when the lease may be near its expiry
		// by this replica's clock (if the server's says so when this one
		// did not, the script asks for a key and the call is made again).
		keyed = mark == 0 || now-t0 >= hold-2*idem*1e6
	}
	var kb [chunkMax]byte
	sc := settleScripts.get(scriptKey(kb[:0], ops, true))
	reply, err := retry(now, keyed, func(now int64, keyed bool) (string, error) {
		return s.run(ctx, sc, "settle", count, s.settleCall(ops, now, clock, tag, keyed, idem, mark, t0))
	})
	if err = settled(ops, reply, err); err != nil {
		failedReleases(ops, time.Unix(0, now))
		return err
	}
	releasedLeases(ops)
	return nil
}

// eval runs script with c's keys and arguments by its hash (EVALSHA), and
// by its source (EVAL, which loads it) when the server does not have it:
// on first use, after a restart or SCRIPT FLUSH, on a Cluster node that
// never ran it.
func (s *Store) eval(ctx context.Context, script *script, c *call) (string, error) {
	reply, err := s.client.Do(ctx, c.command("evalsha", script.sha)...).Text()
	if noScript(err) {
		return s.client.Do(ctx, c.command("eval", script.src)...).Text()
	}
	return reply, err
}

// noScript reports whether err is the server's NOSCRIPT: it has no
// script of that hash. (redis.HasErrorPrefix allocates even for a nil
// error, which every successful call has.)
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// opPeek names a peek's calls, which are reads, not the calls of a
// decision: they are not reported to the observer.
const opPeek = "peek"

// refused reports and returns the error of a call made with ctx that the
// open breaker refused, without allocating: while Redis is down every call of every
// request comes here, and garbage made at that rate would bring the
// collector's pauses onto the decisions still on their way.
func (s *Store) refused(ctx context.Context, op string, policies int) error {
	err := s.openErr
	if s.calls != nil && op != opPeek {
		s.calls.StoreCall(Call{Store: s.cfg.Name, Op: op, Policies: policies, Err: err, Context: ctx})
	}
	return err
}

// finish records the outcome of a call made with ctx that started at
// start in the observer, and returns its error wrapped; probe is the
// breaker's ticket if the call was its probe (0 otherwise), whose slot a
// failed call frees. (Its round trip was counted in the breaker when it
// returned: see judge.)
func (s *Store) finish(ctx context.Context, op string, policies int, start time.Time, probe uint64, err error) error {
	if err != nil {
		s.brk.abandon(probe)
		err = fmt.Errorf("redisstore: %s: %w", op, err)
	}
	if s.calls != nil && op != opPeek {
		s.calls.StoreCall(Call{Store: s.cfg.Name, Op: op, Policies: policies, Duration: time.Since(start), Err: err, Context: ctx})
	}
	return err
}
