package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/metric"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/internal/tokenunits"
	"github.com/sluicehq/sluice/shadow/requestlog"
	"github.com/sluicehq/sluice/weights"
)

// BatchAPI configures OpenAI's Batch API on the gateway: file uploads
// (POST /v1/files, purpose batch), batch creation (POST /v1/batches),
// retrieval (GET /v1/batches/{id}) and cancellation (POST
// /v1/batches/{id}/cancel). Every field documents its default.
//
// # What a batch reserves
//
// A batch is priced from its input file, which the gateway counts line by
// line as the file is uploaded through it: each line's body exactly as
// the same request sent to its url would be (prompt tokens with the
// model's tokenizer plus the output reservation, capped by
// Config.MaxOutputReserve), every line of one model and one url; a
// /v1/responses line continuing a response (previous_response_id) is
// priced from the recorded size of its chain, and one continuing a
// response of another tenant, an unknown one, or naming a conversation
// refuses the file, as the same call to /v1/responses is (see
// ResponsesAPI). The
// gateway keeps only a summary per file (model, url, lines, token sums)
// for the tenant that uploaded it. A batch created from a file the gateway
// did not count (uploaded to the provider directly, by another tenant,
// or before a restart) is refused with 400: fetching it back
// (GET /v1/files/{id}/content, up to 200 MB) on the request path would
// put a provider download of unbounded duration in front of every batch
// creation, and the gateway could not tell whose file it is.
//
// Creating the batch is admitted as one request of operation
// "POST /v1/batches" for the file's model, with the file's tokens (and
// token units) and, while a cost policy is installed, its cost at the
// model's batch price (its price less its batch_discount): a quota
// policy (period: day or month) matching that operation holds the
// reservation until the batch ends. A batch the quota cannot hold now is
// refused as any quota rejection (429, or http.quota_status; Retry-After
// at the period's end); one larger than the whole quota, which can never
// be admitted, with 400 batch_too_large.
//
// # How a reservation ends
//
// The gateway watches every open batch: on the tenant's own retrievals
// and cancellations, and by polling GET /v1/batches/{id} in the
// background (every PollInterval, backing off to MaxPollInterval while
// the upstream fails, at most PollConcurrency polls at once). When the
// batch ends:
//
//   - completed: settled at the usage of the batch object (its usage
//     field) at the batch price; a missing or implausible usage is
//     charged as reserved;
//   - failed: refunded whole (nothing ran);
//   - expired or cancelled: settled at the usage of the requests that
//     did complete, which the provider bills, and refunded whole when
//     none did.
//
// A creation whose outcome is unknown (the call failed once sent, its
// answer was cut or named no valid id) keeps its reservation at the
// estimate; one that never reached the upstream, or that it refused, is
// refunded.
//
// A reservation open longer than MaxHold (the provider's 24-hour
// completion window and some) is settled at its estimate and the batch
// forgotten: a batch whose end the gateway cannot observe (the upstream
// unreachable, the batch stuck) is billed by the provider for what ran,
// so refunding it would let a tenant spend without limit by making batches
// the gateway cannot see end; keeping the estimate never charges more
// than was admitted.
//
// Reservations live in the gateway's memory: a restart forgets them (a
// durable quota store keeps them charged at the estimate), and with
// several replicas each watches the batches created through it, while a
// retrieval through another is passed through only for the batches it
// knows. A tenant sees and cancels only its own batches: another's
// batch id, or one the gateway does not know, is a 404.
type BatchAPI struct {
	// MaxFileBytes bounds an uploaded batch input file; zero means
	// DefaultMaxFileBytes. A larger upload is a 413; it is streamed
	// upstream as it arrives, never held whole.
	MaxFileBytes int64
	// MaxLineBytes bounds one line of an input file; zero means the
	// estimator's body cap (Estimator.MaxBodyBytes).
	MaxLineBytes int64
	// MaxLines bounds the requests of an input file; zero means
	// DefaultMaxLines (OpenAI's limit).
	MaxLines int
	// MinUploadRate is the slowest upload accepted, in bytes a second,
	// measured over each UploadGrace from the upload's start: a span
	// that brings less than MinUploadRate × UploadGrace bytes (the
	// upstream's reading pace included) cuts the upload with 408 and
	// frees its slot. Zero means the policy file's http.upload_min_rate, else
	// DefaultMinUploadRate.
	MinUploadRate int64
	// UploadGrace is the span MinUploadRate is measured over; zero means
	// the policy file's http.upload_grace, else DefaultUploadGrace.
	UploadGrace time.Duration
	// MaxUploads bounds the uploads counted at once (503 server_busy
	// beyond), and MaxUploadsPerTenant those of one tenant (429
	// too_many_uploads beyond), so that no tenant, however slow its
	// uploads, holds another's slot. Zero means the policy file's http.max_uploads
	// and http.max_uploads_per_tenant, else DefaultMaxUploads and
	// DefaultMaxUploadsPerTenant (at most MaxUploads).
	MaxUploads, MaxUploadsPerTenant int
	// MaxFiles bounds the file summaries kept; zero means
	// DefaultMaxFiles. A tenant keeps at most MaxFilesPerTenant (zero
	// means DefaultMaxFilesPerTenant): its oldest is forgotten first.
	MaxFiles, MaxFilesPerTenant int
	// FileTTL is how long a summary is kept for batches to be created
	// from its file; zero means DefaultFileTTL.
	FileTTL time.Duration
	// MaxOpen bounds the batches with an open reservation; zero means
	// DefaultMaxOpen. A tenant has at most MaxOpenPerTenant open (zero
	// means DefaultMaxOpenPerTenant). Beyond either a creation is a 429.
	MaxOpen, MaxOpenPerTenant int
	// MaxRecords bounds the batches whose owner is remembered after they
	// ended, so a tenant can still retrieve its own; zero means
	// DefaultMaxRecords. The oldest ended ones are forgotten first.
	MaxRecords int
	// PollInterval is how often an open batch is retrieved in the
	// background; zero means DefaultPollInterval. MaxPollInterval is the
	// longest wait after failed polls (zero means
	// DefaultMaxPollInterval), PollConcurrency the polls at once (zero
	// means DefaultPollConcurrency).
	PollInterval, MaxPollInterval time.Duration
	PollConcurrency               int
	// MaxHold is the longest a reservation stays open; zero means
	// DefaultMaxHold. Then it is settled at its estimate. The request log
	// records a batch with its true hold time, at most MaxHold and a
	// PollInterval: more than requestlog.MaxRecordDuration is refused.
	MaxHold time.Duration
}

// Defaults of BatchAPI fields left zero.
const (
	DefaultMaxFileBytes        = 200 << 20
	DefaultMaxLines            = 50_000
	DefaultMinUploadRate       = 1 << 20
	DefaultUploadGrace         = 10 * time.Second
	DefaultMaxUploads          = 4
	DefaultMaxUploadsPerTenant = 1
	DefaultMaxFiles            = 10_000
	DefaultMaxFilesPerTenant   = 100
	DefaultFileTTL             = 24 * time.Hour
	DefaultMaxOpen             = 1_000
	DefaultMaxOpenPerTenant    = 50
	DefaultMaxRecords          = 100_000
	DefaultPollInterval        = time.Minute
	DefaultMaxPollInterval     = 10 * time.Minute
	DefaultPollConcurrency     = 4
	DefaultMaxHold             = 26 * time.Hour
)

// The routes of the Batch API. Policies match them as "POST /v1/files",
// "POST /v1/batches", "GET /v1/batches/{id}" and
// "POST /v1/batches/{id}/cancel".
const (
	OpBatches     = "/v1/batches"
	OpBatch       = "/v1/batches/:id"
	OpBatchCancel = "/v1/batches/:id/cancel"
)

var (
	batchesRoute     = route{OpBatches, "POST " + OpBatches, "/batches", weights.EndpointUnknown, nil}
	batchRoute       = route{OpBatch, "GET " + OpBatches + "/{id}", "/batches/", weights.EndpointUnknown, nil}
	batchCancelRoute = route{OpBatchCancel, "POST " + OpBatches + "/{id}/cancel", "/batches/", weights.EndpointUnknown, nil}
)

// maxBatchObject bounds an upstream file or batch object, and a batch
// creation body.
const maxBatchObject = 1 << 20

// maxBatchCreate bounds the body of a batch creation.
const maxBatchCreate = 64 << 10

// batches tracks the Batch API: the summaries of the files counted, the
// open reservations and the owners of batches.
type batches struct {
	g     *Gateway
	cfg   BatchAPI
	clock admission.Clock
	polls chan struct{}
	// Metrics: the reservations open, and the reservations ended by how
	// (the batch's status, held_too_long, unwatchable).
	openGauge metric.Int64UpDownCounter
	ended     metric.Int64Counter

	mu        sync.Mutex
	uploading int            // uploads being counted
	perUpload map[string]int // tenant → its uploads being counted
	files     map[string]*fileEntry
	byOwner   map[string][]string // tenant → its file ids, oldest first
	records   map[string]*batchRecord
	order     []string          // record ids, oldest first
	outputs   map[string]string // output and error file id → tenant
	// outputBytes are the sizes of the output and error files the
	// gateway learned (see learnOutputSize), by id.
	outputBytes map[string]int64
	open        int
	perOpen     map[string]int // tenant → open batches
	timer       admission.Timer
	closed      bool
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

type fileEntry struct {
	sum *fileSummary
	at  time.Time
}

// batchRecord is a batch created through the gateway: its owner and,
// while its reservation is open, the reservation.
type batchRecord struct {
	tenant string
	open   bool
	// messages is set for a batch of Anthropic's Message Batches API,
	// whose usage is read from its results once it has ended (fetching
	// is set while they are being read).
	messages, fetching bool
	tk                 admission.Ticket
	price              weights.Price // the batch price; zero when not priced
	priced             bool
	est                weights.Estimate
	opened             time.Time
	next               time.Time // the next background poll
	fails              int       // polls failed in a row
	poll               bool      // a poll is on its way
	files              []string  // its output and error files, once it ended

	// For the request log: the creation as admitted, when it arrived and
	// when it was admitted.
	req               admission.Request
	arrived, admitted time.Time
}

func newBatches(g *Gateway, cfg BatchAPI, clock admission.Clock) (*batches, error) {
	cfg.MaxFileBytes = positive(cfg.MaxFileBytes, DefaultMaxFileBytes)
	cfg.MaxLineBytes = positive(cfg.MaxLineBytes, g.est.MaxBodyBytes())
	h := &g.file.HTTP
	cfg.MinUploadRate = positive(cfg.MinUploadRate, positive(h.UploadMinRate, DefaultMinUploadRate))
	cfg.UploadGrace = positive(cfg.UploadGrace, positive(h.UploadGrace, DefaultUploadGrace))
	cfg.MaxUploads = int(positive(int64(cfg.MaxUploads), positive(int64(h.MaxUploads), DefaultMaxUploads)))
	cfg.MaxUploadsPerTenant = int(min(positive(int64(cfg.MaxUploadsPerTenant), positive(int64(h.MaxUploadsPerTenant), DefaultMaxUploadsPerTenant)), int64(cfg.MaxUploads)))
	cfg.PollInterval = positive(cfg.PollInterval, DefaultPollInterval)
	cfg.MaxPollInterval = positive(cfg.MaxPollInterval, DefaultMaxPollInterval)
	cfg.MaxHold = positive(cfg.MaxHold, DefaultMaxHold)
	cfg.FileTTL = positive(cfg.FileTTL, DefaultFileTTL)
	for _, f := range []struct {
		v *int
		d int
	}{
		{&cfg.MaxLines, DefaultMaxLines}, {&cfg.MaxFiles, DefaultMaxFiles},
		{&cfg.MaxFilesPerTenant, DefaultMaxFilesPerTenant}, {&cfg.MaxOpen, DefaultMaxOpen},
		{&cfg.MaxOpenPerTenant, DefaultMaxOpenPerTenant}, {&cfg.MaxRecords, DefaultMaxRecords},
		{&cfg.PollConcurrency, DefaultPollConcurrency},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	cfg.MaxRecords = max(cfg.MaxRecords, cfg.MaxOpen)
	if cfg.MaxHold > requestlog.MaxRecordDuration-cfg.PollInterval {
		return nil, fmt.Errorf("gateway: batches: max hold %v and a poll interval of %v exceed the longest hold a request log records (%v)", cfg.MaxHold, cfg.PollInterval, requestlog.MaxRecordDuration)
	}
	if clock == nil {
		clock = admission.SystemClock{}
	}
	b := &batches{
		g: g, cfg: cfg, clock: clock, polls: make(chan struct{}, cfg.PollConcurrency),
		perUpload: map[string]int{}, files: map[string]*fileEntry{}, byOwner: map[string][]string{}, records: map[string]*batchRecord{}, perOpen: map[string]int{}, outputs: map[string]string{},
		outputBytes: map[string]int64{},
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	var errs [2]error
	b.openGauge, errs[0] = g.meter.Int64UpDownCounter("llmproxy.batches.open",
		metric.WithDescription("Batches whose reservation is open, watched until they end."), metric.WithUnit("{batch}"))
	b.ended, errs[1] = g.meter.Int64Counter("llmproxy.batches.ended",
		metric.WithDescription("Batch reservations ended, by outcome: the batch's final status (completed, failed, expired, cancelled), held_too_long (settled at the estimate after MaxHold) or unwatchable (an upstream batch id the gateway refused)."), metric.WithUnit("{batch}"))
	return b, errors.Join(errs[:]...)
}

// registerBatches adds the Batch API routes.
func (g *Gateway) registerBatches(e *echo.Echo) {
	e.POST(OpFiles, on(filesRoute, g.handleFileUpload))
	e.GET(OpFile, on(fileRoute, g.handleOwned))
	e.GET(OpFileContent, on(fileContentRoute, g.handleOwned))
	e.POST(OpBatches, on(batchesRoute, g.handleBatchCreate))
	e.GET(OpBatch, on(batchRoute, g.handleOwned))
	e.POST(OpBatchCancel, on(batchCancelRoute, g.handleOwned))
}

// Close stops watching batches and background responses: the background
// polls end and no more start. Open reservations stay as they are
// (charged at their estimate).
// The gateway's observable instruments stop reporting. Close is for a
// gateway that serves no more requests.
func (g *Gateway) Close() error {
	b := g.batches
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	g.responses.close()
	return g.m.unregister()
}

// startUpload takes an upload slot for tenant: it returns false and the
// status of the refusal, 429 when the tenant has all of its own slots,
// 503 when the gateway has all of them. end gives the slot back.
func (b *batches) startUpload(tenant string) (end func(), status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.perUpload[tenant] >= b.cfg.MaxUploadsPerTenant:
		return nil, http.StatusTooManyRequests
	case b.uploading >= b.cfg.MaxUploads:
		return nil, http.StatusServiceUnavailable
	}
	b.uploading++
	b.perUpload[tenant]++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.uploading--
		if b.perUpload[tenant]--; b.perUpload[tenant] == 0 {
			delete(b.perUpload, tenant)
		}
	}, 0
}

// roomForFile reports whether a summary can be kept for a new file of
// tenant: the table has room, after the expired ones are dropped, or the
// tenant has a file of its own to forget.
func (b *batches) roomForFile(tenant string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireFilesLocked()
	return len(b.files) < b.cfg.MaxFiles || len(b.byOwner[tenant]) > 0
}

// addFile keeps the summary of a file the upstream stored as id.
func (b *batches) addFile(id string, sum *fileSummary) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.files[id]; ok { // the upstream reused an id
		b.dropFileLocked(id, old.sum.tenant)
	}
	own := b.byOwner[sum.tenant]
	if len(own) >= b.cfg.MaxFilesPerTenant || (len(b.files) >= b.cfg.MaxFiles && len(own) > 0) {
		b.dropFileLocked(own[0], sum.tenant)
	}
	b.files[id] = &fileEntry{sum: sum, at: b.clock.Now()}
	b.byOwner[sum.tenant] = append(b.byOwner[sum.tenant], id)
}

func (b *batches) dropFileLocked(id, tenant string) {
	delete(b.files, id)
	own := b.byOwner[tenant]
	for i, x := range own {
		if x == id {
			own = append(own[:i:i], own[i+1:]...)
			break
		}
	}
	if len(own) == 0 {
		delete(b.byOwner, tenant)
	} else {
		b.byOwner[tenant] = own
	}
}

// expireFilesLocked drops the summaries older than FileTTL.
func (b *batches) expireFilesLocked() {
	now := b.clock.Now()
	for tenant, own := range b.byOwner {
		for len(own) > 0 && now.Sub(b.files[own[0]].at) >= b.cfg.FileTTL {
			b.dropFileLocked(own[0], tenant)
			own = b.byOwner[tenant]
		}
	}
}

// file returns the summary of tenant's file id, or nil.
func (b *batches) file(tenant, id string) *fileSummary {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := b.files[id]
	if f == nil || f.sum.tenant != tenant || b.clock.Now().Sub(f.at) >= b.cfg.FileTTL {
		return nil
	}
	return f.sum
}

// reserveSlot takes an open slot for tenant, or reports false.
func (b *batches) reserveSlot(tenant string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.open >= b.cfg.MaxOpen || b.perOpen[tenant] >= b.cfg.MaxOpenPerTenant {
		return false
	}
	b.open++
	b.perOpen[tenant]++
	b.openGauge.Add(context.Background(), 1)
	return true
}

func (b *batches) releaseSlotLocked(tenant string) {
	b.openGauge.Add(context.Background(), -1)
	b.open--
	if b.perOpen[tenant]--; b.perOpen[tenant] <= 0 {
		delete(b.perOpen, tenant)
	}
}

func (b *batches) releaseSlot(tenant string) {
	b.mu.Lock()
	b.releaseSlotLocked(tenant)
	b.mu.Unlock()
}

// track records batch id, created with the open slot and ticket rec
// holds, and starts the background polls when they are not running.
func (b *batches) track(id string, rec *batchRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	rec.opened, rec.next = now, now.Add(b.cfg.PollInterval)
	if old, ok := b.records[id]; ok && old.open { // the upstream reused an id
		b.endLocked(old, nil)
	}
	if _, ok := b.records[id]; !ok {
		b.order = append(b.order, id)
	}
	b.records[id] = rec
	for len(b.records) > b.cfg.MaxRecords {
		// Forget the oldest ended batch; open ones are at most MaxOpen,
		// below MaxRecords.
		for i, x := range b.order {
			if r := b.records[x]; r == nil || !r.open {
				for _, f := range r.files {
					delete(b.outputs, f)
					delete(b.outputBytes, f)
				}
				delete(b.records, x)
				b.order = append(b.order[:i:i], b.order[i+1:]...)
				break
			}
		}
	}
	b.scheduleLocked()
}

// owner reports whether tenant owns batch id of the Batch API.
func (b *batches) owner(tenant, id string) bool { return b.owns(tenant, id, false) }

// owns reports whether tenant owns batch id, of the Message Batches API
// when messages is set, else of the Batch API.
func (b *batches) owns(tenant, id string, messages bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.records[id]
	return r != nil && r.tenant == tenant && r.messages == messages
}

// batchObject is what the gateway reads of an upstream batch object.
type batchObject struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	OutputFile string `json:"output_file_id"`
	ErrorFile  string `json:"error_file_id"`
}

// ownsFile reports whether tenant may read file id: an input file it
// uploaded through the gateway, or the output or error file of one of
// its batches.
func (b *batches) ownsFile(tenant, id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.files[id]; f != nil && f.sum.tenant == tenant {
		return true
	}
	return b.outputs[id] == tenant
}

// fileSize reports whether tenant may read file id (see ownsFile) and
// the file's size in bytes: of an input file it uploaded, as counted at
// upload; of a batch's output or error file, as learned once the tenant
// read its content or its object through the gateway (learnOutputSize),
// else 0: the batch object does not tell it, and the gateway fetches
// nothing on its own.
func (b *batches) fileSize(tenant, id string) (size int64, owned bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f := b.files[id]; f != nil && f.sum.tenant == tenant {
		return f.sum.bytes, true
	}
	if b.outputs[id] != tenant {
		return 0, false
	}
	return b.outputBytes[id], true
}

// maxLearnedFileBytes bounds the size of an output file the gateway
// learns from the upstream: a file object claiming more is recorded at
// this size (which prices it far over any model's context anyway).
const maxLearnedFileBytes = 1 << 40

// learnOutputSize records n as the size of output or error file id,
// which the gateway learned serving its owner tenant the file's content
// (the bytes that passed) or object (its bytes). A negative n is
// ignored; the file of no batch of tenant's is not recorded.
func (b *batches) learnOutputSize(tenant, id string, n int64) {
	if n < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.outputs[id] == tenant && tenant != "" {
		b.outputBytes[id] = min(n, maxLearnedFileBytes)
	}
}

// observe settles the reservation of batch id when the object the
// upstream returned for it (data) says it ended.
func (b *batches) observe(id string, data []byte) {
	b.mu.Lock()
	r := b.records[id]
	b.mu.Unlock()
	if r != nil && r.messages {
		b.observeMessages(id, r, data)
		return
	}
	var obj batchObject
	if json.Unmarshal(data, &obj) != nil || obj.ID != id {
		return
	}
	switch obj.Status {
	case "completed", "failed", "expired", "cancelled":
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.records[id]; r != nil && r.open {
		b.endLocked(r, data)
		b.g.log.Info("llmproxy: batch ended", "batch", id, "status", obj.Status)
	}
}

// endLocked ends r's reservation by the final batch object data: nil
// settles it at its estimate (MaxHold passed).
func (b *batches) endLocked(r *batchRecord, data []byte) {
	r.open = false
	b.releaseSlotLocked(r.tenant)
	if data == nil {
		b.g.logAdmitted(&r.req, r.arrived, admission.Usage{}, r.admitted)
		r.tk.Done()
		b.end("held_too_long")
		return
	}
	var obj batchObject
	_ = json.Unmarshal(data, &obj)
	// Counted once settled and logged: an ended batch is never seen on
	// the metrics before its reservation is.
	defer b.end(obj.Status)
	for _, f := range []string{obj.OutputFile, obj.ErrorFile} {
		if ValidObjectID(f) && b.outputs[f] == "" {
			b.outputs[f] = r.tenant
			r.files = append(r.files, f)
		}
	}
	rep, err := weights.ReadUsage(data)
	// Failed, or expired or cancelled before any request completed:
	// nothing ran.
	nothing := obj.Status == "failed" || (obj.Status != "completed" && (err != nil || !rep.Found() || (rep.Usage.InputTokens == 0 && rep.Usage.OutputTokens == 0)))
	b.closeLocked(r, rep, nothing)
}

// closeLocked ends r's open reservation: refunded whole when nothing of
// the batch ran, else settled at the usage rep reports, checked against
// its estimate (a missing or implausible figure charged as reserved), at
// the batch price.
func (b *batches) closeLocked(r *batchRecord, rep weights.UsageReport, nothing bool) {
	if nothing {
		r.refund(b.g)
		return
	}
	u, fb := r.est.CheckUsage(rep)
	if fb != weights.FallbackNone {
		b.g.m.count(context.Background(), b.g.m.usageFallbacks, fb.String())
	}
	au := tokenunits.Usage(nil, u.Units())
	if r.priced {
		au.Cost, au.CostKnown = r.price.CostMicros(u), true
	}
	b.g.logAdmitted(&r.req, r.arrived, au, r.admitted)
	r.tk.Settle(au)
}

// refund gives back the whole reservation of r, and logs the batch as
// having cost nothing.
func (r *batchRecord) refund(g *Gateway) {
	au := tokenunits.Usage(nil, weights.TokenUnits{})
	au.CostKnown = r.priced
	g.logAdmitted(&r.req, r.arrived, au, r.admitted)
	r.tk.Refund()
}

// end counts a reservation ended, by outcome (a closed set).
func (b *batches) end(outcome string) {
	b.ended.Add(context.Background(), 1, b.g.m.opt("outcome", outcome))
}

// neverSent reports whether a failed upstream call never reached the
// upstream: its connection could not be made.
func neverSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// scheduleLocked arms the poll timer when batches are open and it is not
// armed.
func (b *batches) scheduleLocked() {
	if b.closed || b.timer != nil || b.open == 0 {
		return
	}
	b.timer = b.clock.AfterFunc(b.cfg.PollInterval, b.tick)
}

// tick polls the open batches that are due, at most PollConcurrency at
// once (the others wait for a later tick), and settles at their estimate
// those open longer than MaxHold.
func (b *batches) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = nil
	if b.closed {
		return
	}
	now := b.clock.Now()
	for id, r := range b.records {
		switch {
		case !r.open:
		case now.Sub(r.opened) >= b.cfg.MaxHold:
			// A poll on its way finds it ended.
			b.g.log.Warn("llmproxy: batch reservation held too long, settled at its estimate", "batch", id, "held", now.Sub(r.opened).String())
			b.endLocked(r, nil)
		case !r.poll && !now.Before(r.next):
			select {
			case b.polls <- struct{}{}:
			default:
				continue
			}
			r.poll = true
			b.wg.Add(1)
			go b.poll(id, r)
		}
	}
	b.scheduleLocked()
}

// poll retrieves batch id in the background and observes it; a failure
// backs off.
func (b *batches) poll(id string, r *batchRecord) {
	defer b.wg.Done()
	defer func() { <-b.polls }()
	ctx, cancel := context.WithTimeout(b.ctx, min(b.g.cfg.Timeout, time.Minute))
	defer cancel()
	data, err := b.retrieve(ctx, id, r.messages)
	b.mu.Lock()
	r.poll = false
	if err != nil {
		r.fails = min(r.fails+1, 20)
		wait := b.cfg.PollInterval << r.fails
		if wait <= 0 || wait > b.cfg.MaxPollInterval {
			wait = b.cfg.MaxPollInterval
		}
		r.next = b.clock.Now().Add(wait)
	} else {
		r.fails, r.next = 0, b.clock.Now().Add(b.cfg.PollInterval)
	}
	b.mu.Unlock()
	if err == nil {
		b.observe(id, data)
	}
}

// retrieve gets the upstream's batch object of id, a message batch when
// messages is set.
func (b *batches) retrieve(ctx context.Context, id string, messages bool) ([]byte, error) {
	if !ValidObjectID(id) {
		return nil, errNotForwarded
	}
	path := "/batches/" + id
	if messages {
		path = "/messages" + path
	}
	resp, err := b.g.batchCall(ctx, nil, nil, http.MethodGet, path, nil, "", 0)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := readLimited(resp.Body, maxBatchObject)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New("upstream status " + strconv.Itoa(resp.StatusCode))
	}
	return data, err
}

// handleBatchCreate serves POST /v1/batches: the body is read (bounded)
// and checked, the batch priced from its input file's summary, admitted
// as a reservation, and created upstream.
func (g *Gateway) handleBatchCreate(c echo.Context, rt route) error {
	b := g.batches
	st, req, ok := g.batchCaller(c, maxBatchCreate)
	if !ok {
		return nil
	}
	r := c.Request()
	ctx := r.Context()
	body, err := readLimited(r.Body, maxBatchCreate)
	if err != nil {
		if ctx.Err() == nil {
			g.tooLarge(c, maxBatchCreate)
		}
		return nil
	}
	var fileID, endpoint, window, metadata, expires json.RawMessage
	if err := objectFields(body, objField{"input_file_id", &fileID}, objField{"endpoint", &endpoint}, objField{"completion_window", &window},
		objField{"metadata", &metadata}, objField{"output_expires_after", &expires}); err != nil {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_json", "", "We could not parse the JSON body of your request: "+err.Error()+".")
		return nil
	}
	var id, ep string
	if json.Unmarshal(fileID, &id) != nil || !ValidObjectID(id) {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_value", "input_file_id", "input_file_id must be the id of an uploaded file.")
		return nil
	}
	sum := b.file(req.Tenant, id)
	if sum == nil {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_file", "input_file_id",
			"No batch input file "+id+" was uploaded through this gateway for your account (in the last "+b.cfg.FileTTL.String()+"): upload the file through the gateway, which counts its requests, then create the batch.")
		return nil
	}
	if json.Unmarshal(endpoint, &ep) != nil || ep != sum.endpoint {
		g.batchError(c, http.StatusBadRequest, "invalid_request_error", "invalid_value", "endpoint",
			"endpoint must be the url of the input file's requests, "+sum.endpoint+".")
		return nil
	}
	g.openBatch(c, st, req, sum.model, sum.in, sum.out, false, "input_file_id", "/batches", body)
	return nil
}

// openBatch prices req, the creation of a batch of model whose requests
// add up to in prompt and out output tokens (a message batch when
// messages is set), admits it as the batch's reservation (a 400 naming
// param when it can never fit), creates the batch upstream (body, POST to
// path), and tracks the batch the upstream created: its answer passed on,
// the reservation held until the batch ends.
func (g *Gateway) openBatch(c echo.Context, st *state, req admission.Request, model string, in, out int64, messages bool, param, path string, body []byte) {
	b := g.batches
	r := c.Request()
	ctx := r.Context()
	req.Model = model
	est := weights.Estimate{Model: model, InputTokens: min(in, limits.MaxAmount), OutputTokens: min(out, limits.MaxAmount)}
	tokenunits.Request(&req, weights.TokenUnits{Input: est.InputTokens, Output: est.OutputTokens})
	rec := &batchRecord{tenant: req.Tenant, open: true, est: est, messages: messages}
	if st.cost {
		price, _, ok := st.prices.Resolve(model)
		if !ok {
			g.refused(c, st, errNotPriced)
			return
		}
		rec.price, rec.priced = price.Batch(), true
		req.Cost = min(rec.price.EstimateMicros(est.InputTokens, est.OutputTokens), limits.MaxAmount)
	}
	if req.Tokens > limits.MaxAmount {
		req.Tokens = limits.MaxAmount
	}
	if !b.reserveSlot(req.Tenant) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(b.cfg.PollInterval/time.Second)+1))
		g.batchError(c, http.StatusTooManyRequests, "invalid_request_error", "too_many_open_batches", "",
			"Your account has as many batches running through this gateway as it may ("+strconv.Itoa(b.cfg.MaxOpenPerTenant)+"), or the gateway does. Please retry once one has ended.")
		return
	}
	tracked := false
	defer func() {
		if !tracked {
			b.releaseSlot(req.Tenant)
		}
	}()
	arrived := g.now()
	actx, cancel := g.admissionContext(c)
	tk, err := g.ctl.Admit(actx, req)
	cancel()
	if err != nil {
		var rej *admission.Rejection
		g.logRefused(&req, arrived, err)
		if errors.As(err, &rej) && rej.RetryAfter == limits.Never {
			g.setLimitHeaders(c.Response(), rej.Statuses)
			g.batchError(c, http.StatusBadRequest, "invalid_request_error", "batch_too_large", param,
				"The batch reserves more than the whole limit of policy "+rej.Policy+" ("+strconv.FormatInt(rej.Status.Limit, 10)+" "+unitPhrase(rej.Status)+
					" per period) and can never be admitted: split it into smaller batches.")
			return
		}
		g.refused(c, st, err)
		return
	}
	rec.tk, rec.req, rec.arrived, rec.admitted = tk, req, arrived, g.now()
	g.admitted(c.Response(), st, tk)
	uctx, ucancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer ucancel()
	// A batch may exist upstream that the gateway cannot watch (the call
	// failed once sent, its answer was cut or had no valid id): its
	// reservation stays charged at the estimate. Only a call that never
	// reached the upstream, or that it refused, is refunded.
	unwatchable := func() {
		g.logAdmitted(&req, arrived, admission.Usage{}, rec.admitted)
		tk.Done()
		b.end("unwatchable")
		g.log.Error("llmproxy: a batch creation's outcome is unknown; its reservation is kept at the estimate")
	}
	resp, err := g.batchCall(uctx, st, r, http.MethodPost, path, bytes.NewReader(body), "application/json", int64(len(body)))
	if err != nil {
		if neverSent(err) {
			rec.refund(g)
		} else {
			unwatchable()
		}
		g.upstreamFailed(c, ctx, err)
		return
	}
	defer resp.Body.Close()
	g.m.upstreamStatus(ctx, resp.StatusCode)
	data, err := readLimited(resp.Body, maxBatchObject)
	switch {
	case err != nil && resp.StatusCode == http.StatusOK:
		unwatchable()
		g.upstreamFailed(c, ctx, err)
		return
	case err != nil || resp.StatusCode != http.StatusOK:
		// Nothing was created: the reservation is given back.
		rec.refund(g)
		if err != nil {
			g.upstreamFailed(c, ctx, err)
		} else {
			g.upstreamError(c, resp, data)
		}
		return
	}
	var obj batchObject
	if json.Unmarshal(data, &obj) != nil || !ValidObjectID(obj.ID) {
		unwatchable()
		g.m.count(ctx, g.m.upstreamFailures, "bad_response")
		g.batchError(c, http.StatusBadGateway, "server_error", "bad_upstream_response", "", "The upstream API answered without a valid batch id.")
		return
	}
	tracked = true
	b.track(obj.ID, rec)
	b.observe(obj.ID, data)
	g.writeUpstream(c, resp, data)
}

// handleOwned serves the routes of one object a tenant owns, limited by
// requests: the retrieval and the cancellation of a batch it created
// through the gateway (whose batch object is observed), a file's object
// and content (see batches.ownsFile; the content streams through as it
// comes, under the client write deadline), and a message batch's
// retrieval, cancellation, deletion and results (streamed the same way).
// Any other id is a 404 that never reaches the upstream.
func (g *Gateway) handleOwned(c echo.Context, rt route) error {
	b := g.batches
	st := g.state.Load()
	messages := rt.anthropic()
	isBatch := rt.path == OpBatch || rt.path == OpBatchCancel
	what, code, param, owns := "file", "file_not_found", "file_id", b.ownsFile
	switch {
	case messages:
		what, code, param, owns = "message batch", "batch_not_found", "", func(tenant, id string) bool { return b.owns(tenant, id, true) }
	case isBatch:
		what, code, param, owns = "batch", "batch_not_found", "batch_id", b.owner
	}
	// A valid id has nothing to encode: a path with encoded bytes is not
	// one.
	id := c.Param("id")
	if c.Request().URL.RawPath != "" || !ValidObjectID(id) {
		g.batchError(c, http.StatusNotFound, "invalid_request_error", code, param, "No such "+what+": an id is 1 to 128 letters, digits, - and _.")
		return nil
	}
	req, ok := g.identify(c, st)
	if !ok {
		return nil
	}
	if !owns(req.Tenant, id) {
		g.batchError(c, http.StatusNotFound, "invalid_request_error", code, param,
			"No "+what+" "+id+" for your account: the gateway serves the batches created through it, their input files and their results.")
		return nil
	}
	_, finish, ok := g.admitRequest(c, st, req)
	if !ok {
		return nil
	}
	defer finish()
	path := rt.upstream + id
	switch rt.path {
	case OpBatchCancel, OpMessageBatchCancel:
		path += "/cancel"
	case OpFileContent:
		path += "/content"
	case OpMessageBatchResults:
		path += "/results"
	}
	var streamed func(int64)
	switch rt.path {
	case OpFileContent:
		// The bytes of the whole content are the file's size.
		streamed = func(n int64) { b.learnOutputSize(req.Tenant, id, n) }
	case OpMessageBatchResults:
		streamed = func(int64) {}
	}
	resp, data, ok := g.objectCall(c, st, path, maxBatchObject, streamed)
	if !ok {
		return nil
	}
	switch {
	case rt.path == OpFile:
		var obj struct {
			ID    string `json:"id"`
			Bytes *int64 `json:"bytes"`
		}
		if json.Unmarshal(data, &obj) == nil && obj.ID == id && obj.Bytes != nil {
			b.learnOutputSize(req.Tenant, id, *obj.Bytes)
		}
	case messages && c.Request().Method != http.MethodDelete:
		b.observe(id, data)
		data = gatewayResultsURL(data, id)
	case isBatch:
		b.observe(id, data)
	}
	g.writeUpstream(c, resp, data)
	return nil
}

// batchCaller identifies the caller of a Batch API route and refuses a
// body declared over limit, before anything is admitted or read.
func (g *Gateway) batchCaller(c echo.Context, limit int64) (st *state, req admission.Request, ok bool) {
	st = g.state.Load()
	if req, ok = g.identify(c, st); !ok {
		return st, req, false
	}
	if c.Request().ContentLength > limit {
		g.tooLarge(c, limit)
		return st, req, false
	}
	return st, req, true
}

// objectCall makes the call of a route about one stored object (the
// client's method on path, no body) to the upstream within
// Config.Timeout and reads its answer, up to limit bytes. ok is false
// once the client has been answered: the call failed, the upstream
// refused (its error passed on), or, with streamed set, a 200 was passed
// on as it came (a file's content, under the client write deadline),
// and streamed is called with its size in bytes once the whole of it
// has passed.
func (g *Gateway) objectCall(c echo.Context, st *state, path string, limit int64, streamed func(n int64)) (resp *http.Response, data []byte, ok bool) {
	r := c.Request()
	ctx := r.Context()
	uctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	resp, err := g.batchCall(uctx, st, r, r.Method, path, nil, "", 0)
	if err != nil {
		g.upstreamFailed(c, ctx, err)
		return nil, nil, false
	}
	defer resp.Body.Close()
	g.m.upstreamStatus(ctx, resp.StatusCode)
	if streamed != nil && resp.StatusCode == http.StatusOK {
		if n, err := streamUpstream(c, resp); err == nil {
			streamed(n)
		}
		return nil, nil, false
	}
	if data, err = readLimited(resp.Body, limit); err != nil {
		g.upstreamFailed(c, ctx, err)
		return nil, nil, false
	}
	if resp.StatusCode != http.StatusOK {
		g.upstreamError(c, resp, data)
		return nil, nil, false
	}
	return resp, data, true
}

// admitRequest admits a request limited by requests only (its amounts
// are not read from its body) by the policy set of st, which identified
// it, and answers a refusal itself. It returns the ticket, for reading
// its statuses, and finish, which the caller calls once the
// request has ended: it settles the ticket and writes the request to the
// request log, as a refusal is.
func (g *Gateway) admitRequest(c echo.Context, st *state, req admission.Request) (tk admission.Ticket, finish func(), ok bool) {
	arrived := g.now()
	actx, cancel := g.admissionContext(c)
	defer cancel()
	tk, err := g.ctl.Admit(actx, req)
	if err != nil {
		g.logRefused(&req, arrived, err)
		g.refused(c, st, err)
		return tk, nil, false
	}
	g.admitted(c.Response(), st, tk)
	admitted := g.now()
	return tk, func() {
		g.logAdmitted(&req, arrived, admission.Usage{}, admitted)
		tk.Done()
	}, true
}
