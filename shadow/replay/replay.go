package replay

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/admission/memstore"
	"github.com/sluicehq/sluice/internal/tenantname"
	"github.com/sluicehq/sluice/internal/vclock"
	"github.com/sluicehq/sluice/shadow"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// Defaults of Config.
const (
	// DefaultTopTenants is how many tenants a replay report lists per
	// policy.
	DefaultTopTenants = 10
	// maxNamedUnits bounds the named units a replay sums refused costs
	// for; later ones are summed under shadow.OtherTenant's name.
	maxNamedUnits = 32
)

// A Candidate is one configuration a request log is replayed through.
type Candidate struct {
	// Name identifies the candidate in the report (a file name).
	Name string
	// Config holds its policies and plans.
	Config admission.Config
}

// Config configures a Replayer.
type Config struct {
	// MaxTenants bounds the tenants counted by name, in the whole log and
	// per policy; the others are counted as shadow.OtherTenant. Zero means
	// shadow.DefaultMaxTenants. A tenant whose name is longer than 128
	// bytes, not valid UTF-8, holds a control character or is
	// shadow.OtherTenant is counted and reported under a printable prefix
	// of it, "~" and 16 hex digits of its hash, as the live report does.
	MaxTenants int
	// TopTenants is how many tenants the report lists per policy, most
	// refused first; zero means DefaultTopTenants.
	TopTenants int
	// OnRecordError decides what AddLog (and Run) do with a malformed
	// record of the log. Nil stops the replay at the first one, with its
	// *requestlog.RecordError. Otherwise it is called with each, in log order, on
	// the goroutine that called AddLog, after the records before the line
	// were replayed: nil skips the line (counted in Report.Skipped)
	// and the replay goes on; an error stops the replay with that error.
	OnRecordError func(*requestlog.RecordError) error
	// Reorder is how late a record may come in the log and still be
	// replayed at its own time: records are held back and replayed in
	// time order once the log has gone Reorder past them. A requestlog.Writer
	// writes a request when it ends, so its records are late by their
	// queue wait and duration. Zero replays records in log order.
	// Memory grows with the records of one Reorder of traffic.
	Reorder time.Duration
}

// A Replayer answers "what if these limits had been in place?": it replays
// a request log through one or more candidate configurations and counts,
// per candidate and policy, what was admitted, rejected and would have
// been rejected.
//
// Each candidate runs on its own admission.Controller with an
// virtual clock. Before a record is admitted the clock is set to
// the record's time; an admitted request is settled, with the record's
// actual usage, when the clock passes the record's time plus its
// duration (requests due at the same instant in log order, before any
// request arriving at that instant). Policies keep their modes: an
// enforcing policy rejects, and a rejected request takes nothing from
// the candidate's other policies; a shadow policy never blocks and counts
// what it would reject. The candidate's emergency all-shadow switch is
// off, so enforcing policies really decide.
//
// Queues are simulated: a request an enforcing policy would queue waits
// in the candidate's queue on the virtual clock, with the policy's size,
// timeout, order, priorities and fairness across tenants (the real
// controller queues it), and is admitted when permits free up, settling
// its duration after that, or rejected when the queue is full or its
// timeout passes. Requests still waiting when the log ends are served
// until the last record's time plus the longest queue timeout, then
// counted as rejected (reason none). When several waiters are served at
// the same instant and each then waits in a second queue, their order in
// it follows the goroutines'; with one queued policy per request the
// replay is deterministic.
//
// Records should be in time order. A record earlier than one before it
// is replayed at the later time (the clock never goes back) and counted
// in Report.Reordered.
//
// The replay is deterministic: the same log and candidates give the same
// report. Memory is bounded by the candidates' partitions, the requests
// in flight at once and MaxTenants, not by the length of the log.
// A Replayer is not safe for concurrent use.
type Replayer struct {
	cfg       Config
	runs      []*run
	records   int64
	reordered int64
	skipped   int64
	tokens    bool // some record estimates tokens
	cost      bool // some record estimates cost
	first     time.Time
	last      time.Time
	tenants   *tenantTable[int64]
	sample    int           // the log's tenant sampling, 0 for a whole log
	lateness  time.Duration // the latest a reordered record came
	held      recordHeap
	heldSeq   uint64
	newest    time.Time // the latest time of a record added
}

// heldRecord is a record waiting, with Config.Reorder, for the log
// to go past it.
type heldRecord struct {
	rec requestlog.Record
	seq uint64
}

type recordHeap []heldRecord

func (h recordHeap) Len() int { return len(h) }
func (h recordHeap) Less(i, j int) bool {
	if !h[i].rec.Time.Equal(h[j].rec.Time) {
		return h[i].rec.Time.Before(h[j].rec.Time)
	}
	return h[i].seq < h[j].seq
}
func (h recordHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *recordHeap) Push(x any)   { *h = append(*h, x.(heldRecord)) }
func (h *recordHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = heldRecord{}
	*h = old[:len(old)-1]
	return r
}

// run is one candidate's replay.
type run struct {
	name     string
	ctl      *admission.Controller
	clk      *vclock.Clock
	cfg      *Config
	policies []admission.Policy // evaluation order
	index    map[string]int
	stats    []policyStats
	pending  settleHeap
	seq      uint64
	origin   *time.Time // the first record's time
	latest   time.Time  // the last decision's
	cur      *request   // the request being admitted
	one      request    // cur's storage when requests do not queue

	admitted, rejected, wouldRejected int64
	inFlight, peakInFlight            int64

	// queued is set when an enforcing policy of the candidate queues: its
	// requests are admitted on goroutines of their own (see queuedRun).
	queued *queuedRun
}

// request is one record's admission in a candidate's replay.
type request struct {
	rec *requestlog.Record
	// took lists the policies that took permits; would is set when a
	// shadow policy would have rejected the request.
	took  []int
	would bool
	queuedState
}

type policyStats struct {
	matched, admitted, rejected, wouldReject int64
	reasons                                  [admission.NumReasons]int64
	refusedCost                              amounts
	inFlight, peakInFlight                   int64
	tenants                                  *tenantTable[tenantRefusals]
	series                                   *series
}

type tenantRefusals struct{ rejected, wouldReject int64 }

// amounts sums costs in every unit.
type amounts struct {
	requests, tokens, cost int64
	units                  map[limits.Unit]int64
}

func (a *amounts) add(r *requestlog.Record) {
	a.requests++
	a.tokens = satAdd(a.tokens, r.Tokens)
	a.cost = satAdd(a.cost, r.Cost)
	for _, u := range r.Units {
		if a.units == nil {
			a.units = map[limits.Unit]int64{}
		}
		name := u.Unit
		if _, ok := a.units[name]; !ok && len(a.units) >= maxNamedUnits {
			name = shadow.OtherTenant
		}
		a.units[name] = satAdd(a.units[name], u.Amount)
	}
}

// satAdd returns a+b, saturated at the int64 bounds: a long log's
// refused amounts, each up to limits.MaxAmount, never wrap.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// tenantTable counts per tenant, by safe name (see safeTenant) for the
// first max tenants and under shadow.OtherTenant for the rest.
type tenantTable[T any] struct {
	max int
	m   map[string]*T
}

func newTenantTable[T any](max int) *tenantTable[T] {
	return &tenantTable[T]{max: max, m: map[string]*T{}}
}

// safeTenant returns the name a tenant is counted and reported under: its
// own, unless it is too long, invalid UTF-8, holds a control character or
// is shadow.OtherTenant; then a printable prefix and a hash of the whole
// name, so that it neither fills memory nor breaks a terminal nor hides
// in the overflow bucket.
func safeTenant(tenant string) string { return tenantname.Safe(tenant, shadow.OtherTenant) }

func (t *tenantTable[T]) get(tenant string) *T {
	tenant = safeTenant(tenant)
	if v, ok := t.m[tenant]; ok {
		return v
	}
	if len(t.m) >= t.max {
		tenant = shadow.OtherTenant
		if v, ok := t.m[tenant]; ok {
			return v
		}
	}
	v := new(T)
	t.m[strings.Clone(tenant)] = v
	return v
}

// NewReplayer returns a Replayer of the candidates. Each candidate's
// configuration must be valid for admission.New; policies on a named
// store are evaluated in memory.
func NewReplayer(cfg Config, candidates ...Candidate) (*Replayer, error) {
	if cfg.MaxTenants == 0 {
		cfg.MaxTenants = shadow.DefaultMaxTenants
	}
	if cfg.TopTenants == 0 {
		cfg.TopTenants = DefaultTopTenants
	}
	var errs []error
	if cfg.MaxTenants < 0 {
		errs = append(errs, errors.New("shadow: max tenants must be > 0"))
	}
	if cfg.TopTenants < 0 {
		errs = append(errs, errors.New("shadow: top tenants must be > 0"))
	}
	if len(candidates) == 0 {
		errs = append(errs, errors.New("shadow: no candidate to replay"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rp := &Replayer{cfg: cfg, tenants: newTenantTable[int64](cfg.MaxTenants)}
	for i, c := range candidates {
		r := &run{name: c.Name, cfg: &rp.cfg, origin: &rp.first, clk: vclock.New(time.Time{}), index: map[string]int{}}
		if r.name == "" {
			r.name = fmt.Sprintf("candidate-%d", i+1)
		}
		opts := []admission.Option{admission.WithClock(r.clk), admission.WithObserver(&replayObserver{r: r})}
		for _, p := range c.Config.Policies {
			if p.Store != "" && p.Store != "memory" {
				opts = append(opts, admission.WithStore(p.Store, memstore.Store{}))
			}
		}
		ctl, err := admission.New(c.Config, opts...)
		if err != nil {
			errs = append(errs, fmt.Errorf("candidate %s: %w", r.name, err))
			continue
		}
		ctl.SetAllShadow(false)
		r.ctl = ctl
		r.queued = newQueuedRun(ctl)
		r.policies = ctl.Policies()
		r.stats = make([]policyStats, len(r.policies))
		for j, p := range r.policies {
			r.index[p.Name] = j
			r.stats[j].tenants = newTenantTable[tenantRefusals](cfg.MaxTenants)
			r.stats[j].series = newSeries(cfg.MaxTenants)
		}
		rp.runs = append(rp.runs, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rp, nil
}

// Add replays one record through every candidate (with
// Config.Reorder, once the log has gone past it). The Replayer
// keeps nothing of rec after Add returns. Add does not check the record's
// sampling; AddLog does.
func (rp *Replayer) Add(rec *requestlog.Record) {
	if rp.cfg.Reorder <= 0 {
		rp.replay(rec)
		return
	}
	c := *rec
	c.Units, c.Actual.Units = slices.Clone(c.Units), slices.Clone(c.Actual.Units)
	rp.heldSeq++
	heap.Push(&rp.held, heldRecord{rec: c, seq: rp.heldSeq})
	if c.Time.After(rp.newest) {
		rp.newest = c.Time
	}
	rp.release(rp.newest.Add(-rp.cfg.Reorder))
}

// release replays the held records due by t, in time order.
func (rp *Replayer) release(t time.Time) {
	for len(rp.held) > 0 && !rp.held[0].rec.Time.After(t) {
		h := heap.Pop(&rp.held).(heldRecord)
		rp.replay(&h.rec)
	}
}

// replay replays one record, in order, through every candidate.
func (rp *Replayer) replay(rec *requestlog.Record) {
	at := rec.Time
	if rp.records == 0 {
		rp.first = at
	}
	if at.Before(rp.last) {
		rp.reordered++
		rp.lateness = max(rp.lateness, rp.last.Sub(at))
		at = rp.last
	}
	rp.last = at
	rp.records++
	rp.tokens = rp.tokens || rec.Tokens != 0
	rp.cost = rp.cost || rec.Cost != 0
	*rp.tenants.get(rec.Tenant)++
	req := rec.Request
	var usage admission.Usage
	if rec.Duration > 0 {
		usage = rec.Actual
		if len(usage.Units) > 0 {
			usage.Units = slices.Clone(usage.Units)
		}
	}
	for _, r := range rp.runs {
		r.add(context.Background(), rec, &req, at, &usage)
	}
}

func (r *run) add(ctx context.Context, rec *requestlog.Record, req *admission.Request, at time.Time, usage *admission.Usage) {
	if r.queued != nil {
		r.addQueued(rec, req, at, usage)
		return
	}
	r.settleUntil(at)
	r.clk.Set(at)
	r.countMatched(rec, req)
	r.one = request{rec: rec, took: r.one.took[:0]}
	r.cur = &r.one
	tk, err := r.decide(ctx, rec, *req, false)
	r.cur = nil
	r.admitted1(&r.one, tk, err, at, usage)
}

// decide decides one record's request as the gateway did: a BeginOnly
// record by the policies Controller.Begin evaluates, its ticket settled
// at once at its estimate (the request did no work; its policies report
// it then, while it is the request being admitted); any other by every
// policy, waiting in queues when wait is set.
func (r *run) decide(ctx context.Context, rec *requestlog.Record, req admission.Request, wait bool) (admission.Ticket, error) {
	switch {
	case rec.BeginOnly:
		tk, err := r.ctl.Begin(ctx, req)
		tk.Settle(admission.Usage{})
		return tk, err
	case wait:
		return r.ctl.Admit(ctx, req)
	}
	return r.ctl.TryAdmit(ctx, req)
}

// countMatched counts req, rec's request, for the policies it matches:
// for a BeginOnly record, those Begin decides.
func (r *run) countMatched(rec *requestlog.Record, req *admission.Request) {
	for i := range r.policies {
		// A loop policy counts only the requests that made a step (their
		// fingerprint is logged), as it does live.
		if p := &r.policies[i]; p.AppliesTo(req.Operation, req.Model, req.Session != "") && (!p.DetectsLoops() || !req.Fingerprint.IsZero()) && (!rec.BeginOnly || p.DecidedAtBegin()) {
			r.stats[i].matched++
		}
	}
}

// admitted1 counts one request's verdict, err from the controller, and
// schedules the settlement of an admitted one at its admission time at
// plus its duration.
func (r *run) admitted1(q *request, tk admission.Ticket, err error, at time.Time, usage *admission.Usage) {
	if err != nil {
		r.rejected++
		return
	}
	r.admitted++
	if q.would {
		r.wouldRejected++
	}
	if q.rec.Duration <= 0 {
		tk.Settle(q.rec.Actual)
		for _, i := range q.took {
			ps := &r.stats[i]
			ps.peakInFlight = max(ps.peakInFlight, ps.inFlight+1)
		}
		r.peakInFlight = max(r.peakInFlight, r.inFlight+1)
		return
	}
	r.inFlight++
	r.peakInFlight = max(r.peakInFlight, r.inFlight)
	for _, i := range q.took {
		ps := &r.stats[i]
		ps.inFlight++
		ps.peakInFlight = max(ps.peakInFlight, ps.inFlight)
	}
	r.seq++
	heap.Push(&r.pending, settlement{at: at.Add(q.rec.Duration), seq: r.seq, tk: tk, usage: *usage, took: slices.Clone(q.took)})
}

// settleUntil settles, in order, every admitted request due by t.
func (r *run) settleUntil(t time.Time) {
	for len(r.pending) > 0 && !r.pending[0].at.After(t) {
		s := heap.Pop(&r.pending).(settlement)
		r.clk.Set(s.at)
		r.settle(&s)
	}
}

// settle ends an admitted request.
func (r *run) settle(s *settlement) {
	s.tk.Settle(s.usage)
	r.inFlight--
	for _, i := range s.took {
		r.stats[i].inFlight--
	}
}

// Finish settles every request still in flight, as if the clock ran on
// until the last of them ended (see Replayer for the requests still
// queued). A replay stopped before its end must be finished too, or its
// queued requests wait on.
func (rp *Replayer) Finish() {
	if len(rp.held) > 0 {
		rp.release(rp.newest)
	}
	for _, r := range rp.runs {
		if r.queued != nil {
			r.finishQueued(rp.last)
			continue
		}
		if len(r.pending) > 0 {
			last := r.pending[0].at
			for _, s := range r.pending {
				if s.at.After(last) {
					last = s.at
				}
			}
			r.settleUntil(last)
		}
	}
}

// abandon gives up the requests waiting in the candidates' queues, so
// that a replay stopped before Finish leaves no goroutine behind.
func (rp *Replayer) abandon() {
	for _, r := range rp.runs {
		if r.queued != nil {
			r.queued.cancel()
		}
	}
}

// settlement is an admitted request waiting for its end.
type settlement struct {
	at    time.Time
	seq   uint64
	tk    admission.Ticket
	usage admission.Usage
	took  []int
}

type settleHeap []settlement

func (h settleHeap) Len() int { return len(h) }
func (h settleHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h settleHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *settleHeap) Push(x any)   { *h = append(*h, x.(settlement)) }
func (h *settleHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = settlement{}
	*h = old[:len(old)-1]
	return s
}

// replayObserver counts one candidate's decisions.
type replayObserver struct {
	admission.NopObserver
	r *run
}

func (o *replayObserver) Decision(d *admission.Decision) {
	r := o.r
	if r.queued != nil {
		r.queued.mu.Lock()
		defer r.queued.mu.Unlock()
	}
	i, ok := r.index[d.Policy]
	q := r.requestOf(d)
	if !ok || q == nil {
		return
	}
	ps := &r.stats[i]
	if d.Outcome == admission.Queued {
		q.parked = true
		return
	}
	if d.Outcome == admission.Admitted && d.RolledBack {
		return // another policy rejected the request: bypassed
	}
	now := r.clk.Now()
	r.latest = later(r.latest, now)
	tb := ps.series.tenants.get(d.Tenant)
	slot := ps.series.slot(*r.origin, now)
	switch d.Outcome {
	case admission.Admitted:
		ps.admitted++
		tb.admitted[slot]++
		q.took = append(q.took, i)
	case admission.WouldReject:
		ps.wouldReject++
		ps.reasons[d.Reason]++
		ps.refusedCost.add(q.rec)
		ps.tenants.get(d.Tenant).wouldReject++
		tb.would[slot]++
		q.would = true
	case admission.Rejected, admission.Timeout, admission.FailClosed, admission.Canceled:
		ps.rejected++
		ps.reasons[d.Reason]++
		ps.refusedCost.add(q.rec)
		ps.tenants.get(d.Tenant).rejected++
		tb.rejected[slot]++
	}
}

// Report returns what the replay counted so far. Call Finish first to
// settle the requests still in flight.
func (rp *Replayer) Report() Report {
	rep := Report{
		Records: rp.records, Reordered: rp.reordered, Lateness: rp.lateness, Skipped: rp.skipped,
		TokensEstimated: rp.tokens, CostEstimated: rp.cost, SampleTenants: rp.sample,
	}
	if rp.records > 0 {
		rep.Start, rep.End = rp.first, rp.last
	}
	// The series' common axes: the widest buckets of any, as many as the
	// last decision needs.
	step, latest := time.Second, rp.first
	for _, r := range rp.runs {
		latest = later(latest, r.latest)
		for i := range r.stats {
			step = max(step, r.stats[i].series.step)
		}
	}
	buckets := min(int(latest.Sub(rp.first)/step)+1, seriesBuckets)
	for _, r := range rp.runs {
		cr := CandidateReport{
			Candidate: r.name, Requests: rp.records,
			Admitted: r.admitted, Rejected: r.rejected, WouldRejected: r.wouldRejected,
			PeakInFlight: r.peakInFlight,
		}
		cr.RejectedRatio = shadow.Ratio(r.rejected, rp.records)
		cr.WouldRejectedRatio = shadow.Ratio(r.wouldRejected, rp.records)
		for i, p := range r.policies {
			ps := &r.stats[i]
			pr := Policy{
				Figures: shadow.Figures{
					Policy: p.Name, Mode: p.Mode, Algorithm: p.Algorithm, Unit: p.Unit, Limit: p.Limit,
					Requests: ps.matched, Rejected: ps.rejected, WouldReject: ps.wouldReject,
				},
				Admitted: ps.admitted, PeakInFlight: ps.peakInFlight,
			}
			if rp.records > 0 {
				pr.Series = ps.series.report(rp.first, step, buckets)
			}
			if pr.Unit == "" {
				pr.Unit = limits.UnitRequests
			}
			pr.Bypassed = pr.Requests - pr.Admitted - pr.Rejected - pr.WouldReject
			pr.AdmittedRatio = shadow.Ratio(pr.Admitted, pr.Requests)
			pr.RejectedRatio = shadow.Ratio(pr.Rejected, pr.Requests)
			pr.WouldRejectRatio = shadow.Ratio(pr.WouldReject, pr.Requests)
			for reason, n := range ps.reasons {
				if n > 0 {
					if pr.Reasons == nil {
						pr.Reasons = map[string]int64{}
					}
					pr.Reasons[admission.Reason(reason).String()] = n
				}
			}
			pr.RefusedCost = Amounts{Requests: ps.refusedCost.requests, Tokens: ps.refusedCost.tokens, Cost: ps.refusedCost.cost}
			if len(ps.refusedCost.units) > 0 {
				pr.RefusedCost.Units = map[string]int64{}
				for u, n := range ps.refusedCost.units {
					pr.RefusedCost.Units[string(u)] = n
				}
			}
			for t, c := range ps.tenants.m {
				tf := shadow.TenantFigures{Tenant: t, Rejected: c.rejected, WouldReject: c.wouldReject}
				if req, ok := rp.tenants.m[t]; ok {
					tf.Requests = *req
				}
				pr.Tenants = append(pr.Tenants, tf)
			}
			pr.Total(rp.cfg.TopTenants)
			cr.Policies = append(cr.Policies, pr)
		}
		rep.Candidates = append(rep.Candidates, cr)
	}
	return rep
}

// Run reads the request log r to its end, replays it through the
// candidates and returns the report. A malformed record stops the replay
// with its *requestlog.RecordError unless cfg.OnRecordError says otherwise; ctx
// ending stops it too. See AddLog.
func Run(ctx context.Context, r io.Reader, cfg Config, candidates ...Candidate) (Report, error) {
	rp, err := NewReplayer(cfg, candidates...)
	if err != nil {
		return Report{}, err
	}
	if err := rp.AddLog(ctx, r); err != nil {
		rp.abandon()
		return Report{}, err
	}
	rp.Finish()
	return rp.Report(), nil
}

// Read-ahead of AddLog: records per batch, batches read ahead.
const (
	logBatchSize = 1024
	logBatches   = 4
)

// AddLog reads the request log r to its end and replays each of its
// records, in order, as Add does. A malformed record goes to the
// configuration's OnRecordError (see Config): by default it stops
// the replay with its *requestlog.RecordError. AddLog also stops when reading r
// fails or ctx ends, and returns why; the records before the stop have
// been replayed. It does not call Finish.
//
// Reading and parsing run on their own goroutine, a few batches of
// records ahead of the replay.
func (rp *Replayer) AddLog(ctx context.Context, r io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type badLine struct {
		before int // the batch's records read before it
		err    *requestlog.RecordError
	}
	type batch struct {
		recs []requestlog.Record
		bad  []badLine // the malformed lines among recs, in order
		err  error     // after them: io.EOF or what stopped the reading
	}
	free := make(chan *batch, logBatches)
	for range logBatches {
		free <- &batch{recs: make([]requestlog.Record, 0, logBatchSize)}
	}
	full := make(chan *batch, logBatches)
	go func() {
		defer close(full)
		lr := requestlog.NewReader(r)
		for {
			var b *batch
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
			b.recs, b.bad, b.err = b.recs[:0], b.bad[:0], ctx.Err()
			// Malformed lines count towards the batch too, so that a log
			// of garbage is read in bounded memory.
			for b.err == nil && len(b.recs)+len(b.bad) < logBatchSize {
				n := len(b.recs)
				b.recs = b.recs[:n+1]
				err := lr.Read(&b.recs[n])
				if err == nil {
					continue
				}
				b.recs = b.recs[:n]
				var re *requestlog.RecordError
				if errors.As(err, &re) {
					b.bad = append(b.bad, badLine{before: n, err: re})
				} else {
					b.err = err
				}
			}
			full <- b
			if b.err != nil {
				return
			}
		}
	}()
	for b := range full {
		bad := b.bad
		for i := range b.recs {
			for len(bad) > 0 && bad[0].before == i {
				if err := rp.recordError(bad[0].err); err != nil {
					return err
				}
				bad = bad[1:]
			}
			if err := rp.checkSample(&b.recs[i]); err != nil {
				return err
			}
			rp.Add(&b.recs[i])
		}
		for _, l := range bad {
			if err := rp.recordError(l.err); err != nil {
				return err
			}
		}
		if b.err != nil {
			if errors.Is(b.err, io.EOF) {
				return nil
			}
			return b.err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		free <- b
	}
	return ctx.Err()
}

// ErrSampledLog is the error of replaying a sampled request log through
// a candidate whose answer sampling changes.
var ErrSampledLog = errors.New("shadow: the request log is sampled by tenant")

// checkSample refuses a sampled record when a candidate has a policy
// whose partitions mix tenants: with only some tenants' requests logged,
// such a partition would see a fraction of its traffic, and no scaling of
// the counts gives back what it would have refused. Policies keyed by
// tenant or key id see each sampled tenant's traffic whole.
func (rp *Replayer) checkSample(rec *requestlog.Record) error {
	if rec.Sample <= 1 || rec.Sample == rp.sample {
		return nil
	}
	if rp.sample != 0 {
		return fmt.Errorf("%w: records sampled 1 in %d and 1 in %d tenants are mixed", ErrSampledLog, rp.sample, rec.Sample)
	}
	rp.sample = rec.Sample
	var errs []error
	for _, r := range rp.runs {
		for _, p := range r.policies {
			if !slices.Contains(p.Key, limits.KeyTenant) && !slices.Contains(p.Key, limits.KeyKeyID) {
				errs = append(errs, fmt.Errorf("%w (1 in %d): candidate %s: policy %s is not partitioned by tenant or key_id, so its replay would be wrong", ErrSampledLog, rec.Sample, r.name, p.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// recordError applies the configuration's OnRecordError to a malformed
// record: nil means the line is skipped.
func (rp *Replayer) recordError(re *requestlog.RecordError) error {
	if rp.cfg.OnRecordError == nil {
		return re
	}
	if err := rp.cfg.OnRecordError(re); err != nil {
		return err
	}
	rp.skipped++
	return nil
}

// A Report is the outcome of a replay, per candidate.
type Report struct {
	// Records counts the records replayed.
	Records int64 `json:"records"`
	// Start and End are the times of the first and the last record.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Reordered counts records earlier than a record before them,
	// replayed at the later time; Lateness is how much earlier the
	// latest of them was: a Config.Reorder of Lateness replays
	// them all at their own time.
	Reordered int64         `json:"reordered"`
	Lateness  time.Duration `json:"lateness_ns,omitempty"`
	// Skipped counts the malformed lines of the log that
	// Config.OnRecordError let the replay skip.
	Skipped int64 `json:"-"`
	// TokensEstimated and CostEstimated report whether any record
	// replayed estimates tokens or cost: without one, the refused amount
	// of that unit says nothing, and WriteText leaves out its column.
	// Skipped and the two flags are not part of the JSON form.
	TokensEstimated bool `json:"-"`
	CostEstimated   bool `json:"-"`
	// SampleTenants is N when the log held the requests of one tenant in
	// N: the counts are those of the sampled tenants (about 1/N of the
	// traffic), exact for them; zero for a whole log.
	SampleTenants int `json:"sample_tenants,omitempty"`
	// Candidates are in the order they were given.
	Candidates []CandidateReport `json:"candidates"`
}

// A CandidateReport is what one candidate configuration did to the log.
type CandidateReport struct {
	// Candidate is the candidate's name.
	Candidate string `json:"candidate"`
	// Requests counts the records; Admitted and Rejected split them by
	// the candidate's verdict (a request is rejected when an enforcing
	// policy rejected it).
	Requests int64 `json:"requests"`
	Admitted int64 `json:"admitted"`
	Rejected int64 `json:"rejected"`
	// WouldRejected counts admitted requests that at least one shadow
	// policy would have rejected.
	WouldRejected int64 `json:"would_rejected"`
	// RejectedRatio and WouldRejectedRatio are shares of Requests.
	RejectedRatio      float64 `json:"rejected_ratio"`
	WouldRejectedRatio float64 `json:"would_rejected_ratio"`
	// PeakInFlight is the most admitted requests running at once.
	PeakInFlight int64 `json:"peak_in_flight"`
	// Policies are in the candidate's evaluation order.
	Policies []Policy `json:"policies"`
}

// A Policy is what one policy of a candidate decided: its Figures,
// where Requests counts the requests the policy applies to (matched by
// its operations and models) and the ratios are shares of them, and the
// replay's own figures.
type Policy struct {
	shadow.Figures
	// Each request counted in Requests was admitted by the policy,
	// rejected, would have been rejected (shadow), or bypassed: rejected
	// by another enforcing policy before this one decided, or after it
	// admitted (its permits were given back).
	Admitted int64 `json:"admitted"`
	Bypassed int64 `json:"bypassed"`
	// The ratios are shares of Requests.
	AdmittedRatio    float64 `json:"admitted_ratio"`
	RejectedRatio    float64 `json:"rejected_ratio"`
	WouldRejectRatio float64 `json:"would_reject_ratio"`
	// Reasons counts rejections and would-rejects by reason.
	Reasons map[string]int64 `json:"reasons,omitempty"`
	// RefusedCost sums the estimated cost of the requests the policy
	// rejected or would have rejected, in every unit.
	RefusedCost Amounts `json:"refused_cost"`
	// PeakInFlight is the most requests holding the policy's permits at
	// once (admitted by it and not yet finished).
	PeakInFlight int64 `json:"peak_in_flight"`
	// Series is what the policy decided over time, per top tenant (not
	// part of the JSON form; WriteHTML charts it).
	Series *Series `json:"-"`
}

// Amounts are costs in every unit: requests, tokens, cost and the named
// units.
type Amounts struct {
	// Requests counts requests; Tokens and Cost sum their estimates;
	// Units sums named units (at most 32 names, the rest under
	// shadow.OtherTenant's name). Sums stop at the largest int64.
	Requests int64            `json:"requests"`
	Tokens   int64            `json:"tokens"`
	Cost     int64            `json:"cost"`
	Units    map[string]int64 `json:"units,omitempty"`
}
