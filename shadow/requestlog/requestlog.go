package requestlog

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
	"github.com/sluicehq/sluice/admission/limits"
)

// Limits of the request log format.
const (
	// MaxRecordBytes is the longest line a request log may hold.
	MaxRecordBytes = 64 << 10
	// MaxRecordUnits is the most named units one record may carry.
	MaxRecordUnits = 16
	// MaxRecordDuration is the longest hold time a record may have: a
	// week, beyond the longest an LLM gateway holds a batch's permits
	// (the provider's 24-hour completion window and some), so that a
	// record holds the true time.
	MaxRecordDuration = 7 * 24 * time.Hour
)

// A Record is one request of a request log: who sent it, when, what it
// was estimated to cost, and optionally what it really cost and how long
// it held its permits.
//
// A request log is JSON Lines: one JSON object per line, in time order,
// blank lines ignored. Its fields are
//
//	time       RFC 3339 time the request arrived, fractional seconds allowed
//	           ("2026-01-01T12:00:00.250Z"); required
//	tenant     the tenant (validated identity); required
//	key_id     the API key's id (never the key); optional
//	user       the end user inside the tenant; optional
//	ip         the client address; optional
//	operation  the operation policies match, e.g. "POST /v1/chat/completions"
//	model      the model asked for
//	priority   the queue priority (an integer)
//	tokens     the estimated tokens (prompt plus output reservation)
//	cost       the estimated cost (micro-dollars or cost units)
//	units      other named units' estimates: {"images": 2}
//	actual     the actual usage known after the work: {"tokens": 812,
//	           "cost": 95, "units": {"images": 2}}; a unit left out stays
//	           charged at its estimate
//	duration   how long the work ran (a Go duration, "1.5s"): its
//	           concurrency permits are held that long; zero or absent
//	           settles it at once
//	sample     N when the log holds the requests of one tenant in N
//	           (WriterConfig.SampleTenants); absent when it holds all
//	begin_only true when the request ended before its body was priced
//	           (the gateway refused the body: malformed, too large,
//	           unreadable): only the policies that need nothing from a
//	           body decided it, as admission.Controller.Begin does, and a
//	           replay decides it with those policies alone; such a record
//	           has no actual usage and no duration
//
// The requests unit is implied: every record is one request. Amounts are
// non-negative integers. An unknown field is an error, as in policy files.
//
// The format only grows: a log written before a field existed reads and
// replays as it did (a record without begin_only is decided by every
// policy). A reader older than a field refuses the records that carry it
// as having an unknown field: replay a log with begin_only records with a
// reader that knows it (see replay.Config.OnRecordError to skip them
// instead).
type Record struct {
	// Time is when the request arrived.
	Time time.Time
	// Request is the request as it was admitted: its identity, what
	// policies match on (operation, model), its priority and the
	// estimates made before the work started (named units sorted by unit).
	admission.Request
	// Actual is the actual usage, in the encoding Ticket.Settle takes: an
	// amount is known when its Known flag is set or it is not zero, and
	// the zero Usage knows nothing (the estimates stay charged).
	Actual admission.Usage
	// Duration is how long the work held its permits.
	Duration time.Duration
	// Sample is N when the log the record is part of holds the requests
	// of one tenant in N, zero (or one) when it holds every request.
	Sample int
	// BeginOnly marks a request that ended before its body was priced
	// (a body refused as malformed or too large): only the policies
	// admission.Controller.Begin evaluates decided it, and a replay
	// decides it with Begin, settled at once at its estimate.
	BeginOnly bool
}

// AppendJSON appends the record as one JSON object (no newline) to dst.
// Fields with zero values are left out, named units are written in order,
// the time in RFC 3339 with as many fractional digits as it needs, so
// equal records are equal bytes and parsing the line gives the record back.
func (r *Record) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"time":"`...)
	dst = r.Time.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	str := func(name, v string) {
		if v != "" {
			dst = append(dst, `,"`...)
			dst = append(dst, name...)
			dst = append(dst, `":`...)
			dst = appendJSONString(dst, v)
		}
	}
	num := func(name string, v int64) {
		if v != 0 {
			dst = append(dst, `,"`...)
			dst = append(dst, name...)
			dst = append(dst, `":`...)
			dst = strconv.AppendInt(dst, v, 10)
		}
	}
	units := func(us []admission.UnitAmount) {
		if len(us) == 0 {
			return
		}
		dst = append(dst, `,"units":{`...)
		for i, u := range us {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, string(u.Unit))
			dst = append(dst, ':')
			dst = strconv.AppendInt(dst, u.Amount, 10)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `,"tenant":`...)
	dst = appendJSONString(dst, r.Tenant)
	str("key_id", r.KeyID)
	str("user", r.User)
	str("session", r.Session)
	if !r.Fingerprint.IsZero() {
		var hx [2 * len(r.Fingerprint)]byte
		hex.Encode(hx[:], r.Fingerprint[:])
		dst = append(dst, `,"fingerprint":"`...)
		dst = append(dst, hx[:]...)
		dst = append(dst, '"')
	}
	if r.Addr.IsValid() {
		str("ip", r.Addr.String())
	}
	str("operation", r.Operation)
	str("model", r.Model)
	num("priority", int64(r.Priority))
	num("tokens", r.Tokens)
	num("cost", r.Cost)
	units(r.Units)
	if a := &r.Actual; a.TokensKnown || a.Tokens != 0 || a.CostKnown || a.Cost != 0 || len(a.Units) > 0 {
		dst = append(dst, `,"actual":{`...)
		mark := len(dst)
		if a.TokensKnown || a.Tokens != 0 {
			dst = append(dst, `,"tokens":`...)
			dst = strconv.AppendInt(dst, a.Tokens, 10)
		}
		if a.CostKnown || a.Cost != 0 {
			dst = append(dst, `,"cost":`...)
			dst = strconv.AppendInt(dst, a.Cost, 10)
		}
		units(a.Units)
		if len(dst) > mark { // drop the first field's comma
			dst = append(dst[:mark], dst[mark+1:]...)
		}
		dst = append(dst, '}')
	}
	if r.Duration != 0 {
		str("duration", r.Duration.String())
	}
	num("sample", int64(r.Sample))
	if r.BeginOnly {
		dst = append(dst, `,"begin_only":true`...)
	}
	return append(dst, '}')
}

// MarshalJSON returns AppendJSON's form of the record.
func (r *Record) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil), nil }

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}

// A RecordError is a malformed record: its line number in the log and
// what is wrong with it.
type RecordError struct {
	Line int
	Err  error
}

// Error returns "line N: " and the problem.
func (e *RecordError) Error() string { return "line " + strconv.Itoa(e.Line) + ": " + e.Err.Error() }

// Unwrap returns the underlying problem.
func (e *RecordError) Unwrap() error { return e.Err }

// A Reader reads a request log one Record at a time, in constant
// memory (one line at a time).
type Reader struct {
	br     *bufio.Reader
	line   int
	buf    []byte
	intern interner
}

// NewReader returns a reader of the request log r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Line returns the line number of the record last read.
func (lr *Reader) Line() int { return lr.line }

// Read reads the next record into rec. It returns io.EOF at the end of the
// log and a *RecordError for a malformed record; reading may go on after
// a *RecordError.
func (lr *Reader) Read(rec *Record) error {
	for {
		line, err := lr.readLine()
		if err != nil {
			return err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if err := parseRecord(line, rec, lr.intern.str); err != nil {
			return &RecordError{Line: lr.line, Err: err}
		}
		return nil
	}
}

// readLine returns the next line without its newline.
func (lr *Reader) readLine() ([]byte, error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		if len(lr.buf)+len(chunk) > MaxRecordBytes+1 {
			lr.line++
			// Skip the rest of the line so that reading can go on.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = lr.br.ReadSlice('\n')
			}
			return nil, &RecordError{Line: lr.line, Err: fmt.Errorf("record longer than %d bytes", MaxRecordBytes)}
		}
		switch {
		case err == nil:
			lr.line++
			if len(lr.buf) == 0 {
				return chunk[:len(chunk)-1], nil
			}
			lr.buf = append(lr.buf, chunk[:len(chunk)-1]...)
			return lr.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			lr.buf = append(lr.buf, chunk...)
		case errors.Is(err, io.EOF):
			lr.buf = append(lr.buf, chunk...)
			if len(lr.buf) == 0 {
				return nil, io.EOF
			}
			lr.line++
			return lr.buf, nil
		default:
			return nil, err
		}
	}
}

// recordJSON is the wire form of a Record.
type recordJSON struct {
	Time        *string          `json:"time"`
	Tenant      *string          `json:"tenant"`
	KeyID       string           `json:"key_id"`
	User        string           `json:"user"`
	Session     string           `json:"session"`
	Fingerprint string           `json:"fingerprint"`
	IP          string           `json:"ip"`
	Operation   string           `json:"operation"`
	Model       string           `json:"model"`
	Priority    int              `json:"priority"`
	Tokens      int64            `json:"tokens"`
	Cost        int64            `json:"cost"`
	Units       map[string]int64 `json:"units"`
	Actual      *actualJSON      `json:"actual"`
	Duration    string           `json:"duration"`
	Sample      int              `json:"sample"`
	BeginOnly   bool             `json:"begin_only"`

	timeVal, tenantVal string // what Time and Tenant point to after parseFast
}

type actualJSON struct {
	Tokens *int64           `json:"tokens"`
	Cost   *int64           `json:"cost"`
	Units  map[string]int64 `json:"units"`
}

// ParseRecord parses one line of a request log into rec, overwriting it.
// It reports the record's problems at once, each naming its field (a
// value of the wrong JSON type is reported alone).
func ParseRecord(line []byte, rec *Record) error {
	return parseRecord(line, rec, func(b []byte) string { return string(b) })
}

func parseRecord(line []byte, rec *Record, str func([]byte) string) error {
	var w recordJSON
	if !parseFast(line, &w, str) {
		w = recordJSON{}
		var rd bytes.Reader
		rd.Reset(line)
		dec := json.NewDecoder(&rd)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&w); err != nil {
			return jsonError(err, line)
		}
		if off := dec.InputOffset(); len(bytes.TrimSpace(line[off:])) > 0 {
			return fmt.Errorf("unexpected data after the record at column %d", off+1)
		}
	}
	*rec = Record{Request: admission.Request{KeyID: w.KeyID, User: w.User, Session: w.Session, Operation: w.Operation, Model: w.Model, Priority: w.Priority, Tokens: w.Tokens, Cost: w.Cost}, Sample: w.Sample, BeginOnly: w.BeginOnly}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	switch {
	case w.Time == nil:
		bad("time", "missing")
	default:
		t, err := time.Parse(time.RFC3339Nano, *w.Time)
		if err != nil {
			bad("time", "%q is not an RFC 3339 time such as 2026-01-01T12:00:00.25Z", *w.Time)
		}
		rec.Time = t
	}
	switch {
	case w.Tenant == nil:
		bad("tenant", "missing")
	case *w.Tenant == "":
		bad("tenant", "must not be empty")
	default:
		rec.Tenant = *w.Tenant
	}
	if w.Session != "" && !apikey.ValidSession(w.Session, apikey.MaxSessionLength) {
		bad("session", "not a session id: 1 to %d bytes of printable ASCII, no space", apikey.MaxSessionLength)
	}
	if w.Fingerprint != "" {
		if _, err := hex.Decode(rec.Fingerprint[:], []byte(w.Fingerprint)); err != nil || len(w.Fingerprint) != 2*len(rec.Fingerprint) {
			bad("fingerprint", "not a step fingerprint: %d hex digits", 2*len(rec.Fingerprint))
		}
	}
	if w.IP != "" {
		a, err := netip.ParseAddr(w.IP)
		if err != nil {
			bad("ip", "%q is not an IP address", w.IP)
		}
		rec.Addr = a
	}
	if w.Tokens < 0 {
		bad("tokens", "must be >= 0, got %d", w.Tokens)
	}
	if w.Sample < 0 {
		bad("sample", "must be >= 0, got %d", w.Sample)
	}
	if w.Cost < 0 {
		bad("cost", "must be >= 0, got %d", w.Cost)
	}
	rec.Units = parseUnits("units", w.Units, bad)
	if a := w.Actual; a != nil {
		rec.Actual.Units = parseUnits("actual.units", a.Units, bad)
		if a.Tokens != nil {
			rec.Actual.Tokens, rec.Actual.TokensKnown = *a.Tokens, true
		}
		if a.Cost != nil {
			rec.Actual.Cost, rec.Actual.CostKnown = *a.Cost, true
		}
		if a.Tokens != nil && *a.Tokens < 0 {
			bad("actual.tokens", "must be >= 0, got %d", *a.Tokens)
		}
		if a.Cost != nil && *a.Cost < 0 {
			bad("actual.cost", "must be >= 0, got %d", *a.Cost)
		}
	}
	if w.Duration != "" {
		d, err := time.ParseDuration(w.Duration)
		switch {
		case err != nil:
			bad("duration", "%q is not a duration such as 1.5s or 250ms", w.Duration)
		case d < 0:
			bad("duration", "must be >= 0, got %s", w.Duration)
		case d > MaxRecordDuration:
			bad("duration", "must be at most %s, got %s", MaxRecordDuration, w.Duration)
		}
		rec.Duration = d
	}
	if w.BeginOnly {
		// The request did no work: nothing to settle but its estimate.
		if w.Actual != nil {
			bad("actual", "a begin_only request has no actual usage")
		}
		if w.Duration != "" {
			bad("duration", "a begin_only request has no duration")
		}
	}
	return errors.Join(errs...)
}

// parseUnits turns a units object into sorted amounts.
func parseUnits(field string, m map[string]int64, bad func(field, format string, args ...any)) []admission.UnitAmount {
	if len(m) == 0 {
		return nil
	}
	if len(m) > MaxRecordUnits {
		bad(field, "at most %d named units, got %d", MaxRecordUnits, len(m))
		return nil
	}
	out := make([]admission.UnitAmount, 0, len(m))
	for _, u := range slices.Sorted(maps.Keys(m)) {
		n := m[u]
		switch limits.Unit(u) {
		case "", limits.UnitRequests, limits.UnitTokens, limits.UnitCost:
			bad(field, "%q is not a named unit (requests are implied; tokens and cost have their own fields)", u)
			continue
		}
		if n < 0 {
			bad(field+"."+u, "must be >= 0, got %d", n)
		}
		out = append(out, admission.UnitAmount{Unit: limits.Unit(u), Amount: n})
	}
	return out
}

// jsonError rewords encoding/json's errors for a person reading a log.
func jsonError(err error, line []byte) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at column %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return fmt.Errorf("a record must be a JSON object, got %s", typ.Value)
		}
		t := typ.Type
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		return fmt.Errorf("%s: want %s, got %s", field, kindName(t.Kind()), typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("truncated JSON record (%d bytes)", len(line))
	}
	if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s", s)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return k.String()
}
