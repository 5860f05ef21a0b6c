package replay

import (
	"cmp"
	"container/heap"
	"context"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// queuedRun is the part of a candidate's replay that waits requests in
// the enforcing policies' queues, as the gateway does: each request is
// admitted with Controller.Admit on a goroutine of its own, on the
// candidate's virtual clock, and the replay moves the clock only when
// every such goroutine has either returned or is waiting in a queue
// (quiescence), so that the same log always gives the same report. The
// real controller does the queueing: its size, timeout, order, priority
// and fairness across tenants.
type queuedRun struct {
	ctl     *admission.Controller
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration // the longest queue timeout of the candidate
	// queues marks the policies (by evaluation index) whose queue a
	// settlement may serve; several is set when more than one does, so
	// that an admission refused after taking a queued permit may serve
	// another queue.
	queues  []bool
	several bool
	// mu guards what the goroutines and the observer share with the
	// replay: the run's statistics and the fields below.
	mu          sync.Mutex
	byDec       map[*admission.Decision]*request
	outstanding int        // goroutines whose Admit has not returned
	finished    []*request // admissions returned since last collected
}

// queuedState is a request's part in a queuedRun.
type queuedState struct {
	seq    uint64              // the record's order in the log
	dec    *admission.Decision // what the controller reports its decisions with
	parked bool                // it was queued at least once
	done   bool                // Admit returned
	tk     admission.Ticket
	err    error
	req    admission.Request
	usage  admission.Usage
}

// newQueuedRun returns the queueing part of a candidate's replay, or nil
// when no enforcing policy of ctl queues.
func newQueuedRun(ctl *admission.Controller) *queuedRun {
	var timeout time.Duration
	ps := ctl.Policies()
	queues, n := make([]bool, len(ps)), 0
	for i, p := range ps {
		if p.Queue.Size > 0 && p.Mode == limits.Enforce {
			queues[i] = true
			n++
			timeout = max(timeout, p.Queue.Timeout)
		}
	}
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &queuedRun{ctl: ctl, ctx: ctx, cancel: cancel, timeout: timeout, queues: queues, several: n > 1, byDec: map[*admission.Decision]*request{}}
}

// requestOf returns the request a decision is about. The controller
// reports every decision of one admission through the same *Decision
// (the admission's own), so the first decision of a new admission binds
// that pointer to the request being admitted: the replay starts an
// admission only at quiescence, when no other admission runs, and waits
// for its first decision, a return or a queued one, before going on.
// Callers hold q.mu.
func (r *run) requestOf(d *admission.Decision) *request {
	if r.queued == nil {
		return r.cur
	}
	if q, ok := r.queued.byDec[d]; ok {
		return q
	}
	if q := r.cur; q != nil && q.dec == nil {
		q.dec = d
		r.queued.byDec[d] = q
		return q
	}
	return nil
}

// addQueued replays one record through a candidate that queues.
func (r *run) addQueued(rec *requestlog.Record, req *admission.Request, at time.Time, usage *admission.Usage) {
	qr := r.queued
	r.advance(at)
	c := *rec
	c.Units, c.Actual.Units = slices.Clone(c.Units), slices.Clone(c.Actual.Units)
	q := &request{rec: &c}
	q.req = c.Request
	q.usage = *usage
	if len(q.usage.Units) > 0 {
		q.usage.Units = slices.Clone(q.usage.Units)
	}
	r.seq++
	q.seq = r.seq
	qr.mu.Lock()
	r.countMatched(rec, req)
	r.cur = q
	qr.outstanding++
	qr.mu.Unlock()
	go func() {
		tk, err := r.decide(qr.ctx, q.rec, q.req, true)
		qr.mu.Lock()
		q.tk, q.err, q.done = tk, err, true
		delete(qr.byDec, q.dec)
		qr.outstanding--
		qr.finished = append(qr.finished, q)
		qr.mu.Unlock()
	}()
	r.quiesce(q, qr.several)
	qr.mu.Lock()
	r.cur = nil
	qr.mu.Unlock()
	r.collect()
}

// quiesce waits until q (when not nil) has returned or been queued and,
// when served is set (the last step may have served a queue), until every
// admission running has returned or waits in a queue. Without served,
// the admissions other than q were all waiting before and still are.
func (r *run) quiesce(q *request, served bool) {
	qr := r.queued
	for {
		qr.mu.Lock()
		n := qr.outstanding
		ready := q == nil || q.done || q.parked
		qr.mu.Unlock()
		if ready && (!served || n == 0 || n == r.waiting()) {
			return
		}
		runtime.Gosched()
	}
}

// servesQueue reports whether settling permits of the policies took may
// serve a queue.
func (qr *queuedRun) servesQueue(took []int) bool {
	return slices.ContainsFunc(took, func(i int) bool { return qr.queues[i] })
}

// waiting returns how many requests wait in the candidate's queues.
func (r *run) waiting() int {
	n := 0
	for _, s := range r.ctl.Stats() {
		n += s.Queued
	}
	return n
}

// collect counts the admissions that returned, in log order, and
// schedules the settlements of the admitted ones from now; settling one
// at once may serve waiters, whose admissions are collected too.
func (r *run) collect() {
	qr := r.queued
	for {
		qr.mu.Lock()
		done := qr.finished
		qr.finished = nil
		qr.mu.Unlock()
		if len(done) == 0 {
			return
		}
		slices.SortFunc(done, func(a, b *request) int { return cmp.Compare(a.seq, b.seq) })
		now := r.clk.Now()
		served := false
		for _, q := range done {
			r.admitted1(q, q.tk, q.err, now, &q.usage)
			served = served || (q.err == nil && q.rec.Duration <= 0 && qr.servesQueue(q.took))
		}
		r.quiesce(nil, served)
	}
}

// advance moves the candidate's clock to t, running in time order the
// queues' timers (a timeout, a retry of the head of a queue) and the
// settlements due, each followed by quiescence; timers due at a
// settlement's instant run first.
func (r *run) advance(t time.Time) {
	for {
		bound := t
		due := len(r.pending) > 0 && !r.pending[0].at.After(t)
		if due {
			bound = r.pending[0].at
		}
		if r.clk.Step(bound) {
			r.quiesce(nil, true)
			r.collect()
			continue
		}
		if !due {
			return
		}
		s := heap.Pop(&r.pending).(settlement)
		r.settle(&s)
		r.quiesce(nil, r.queued.servesQueue(s.took))
		r.collect()
	}
}

// finishQueued settles every request in flight and serves the queues
// until the last record's time plus the longest queue timeout; requests
// still waiting then are given up (canceled) and counted as rejected.
func (r *run) finishQueued(last time.Time) {
	qr := r.queued
	end := last.Add(qr.timeout)
	for _, s := range r.pending {
		end = later(end, s.at)
	}
	for {
		r.advance(end)
		if len(r.pending) == 0 {
			break
		}
		end = r.pending[0].at
		for _, s := range r.pending {
			end = later(end, s.at)
		}
	}
	qr.cancel()
	for {
		qr.mu.Lock()
		n := qr.outstanding
		qr.mu.Unlock()
		if n == 0 {
			break
		}
		runtime.Gosched()
	}
	r.collect()
	for _, s := range r.pending {
		end = later(end, s.at)
	}
	r.advance(end)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
