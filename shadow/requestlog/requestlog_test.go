package requestlog_test

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow/internal/shadowtest"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

func TestParseRecord(t *testing.T) {
	tests := []struct {
		line string
		want requestlog.Record
	}{
		{`{"time":"2026-01-01T12:00:00Z","tenant":"acme"}`, requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "acme"}}},
		{
			`{"time":"2026-01-01T12:00:00.25Z","tenant":"acme","key_id":"key_1","user":"u1","ip":"2001:db8::1","operation":"POST /v1/chat/completions","model":"gpt-4o","priority":2,"tokens":1200,"cost":350,"units":{"images":2,"audio_s":9},"actual":{"tokens":900,"units":{"images":1}},"duration":"1.5s"}`,
			requestlog.Record{
				Time: shadowtest.T0.Add(250 * time.Millisecond),
				Request: admission.Request{Tenant: "acme", KeyID: "key_1", User: "u1", Addr: netip.MustParseAddr("2001:db8::1"),
					Operation: "POST /v1/chat/completions", Model: "gpt-4o", Priority: 2, Tokens: 1200, Cost: 350,
					Units: []admission.UnitAmount{{Unit: "audio_s", Amount: 9}, {Unit: "images", Amount: 2}}},
				Actual:   admission.Usage{Tokens: 900, TokensKnown: true, Units: []admission.UnitAmount{{Unit: "images", Amount: 1}}},
				Duration: 1500 * time.Millisecond,
			},
		},
		{`{"time":"2026-01-01T12:00:00Z","tenant":"acme","operation":"POST /v1/chat/completions","begin_only":true}`,
			requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "acme", Operation: "POST /v1/chat/completions"}, BeginOnly: true}},
		{`{"time":"2026-01-01T12:00:00Z","tenant":"acme","session":"run-7","model":"gpt-4o"}`,
			requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "acme", Session: "run-7", Model: "gpt-4o"}}},
		{`{"time":"2026-01-01T12:00:00Z","tenant":"acme","session":"run-7","fingerprint":"0a0000000000000000000000000000ff"}`,
			requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "acme", Session: "run-7", Fingerprint: limits.Fingerprint{0: 0x0a, 15: 0xff}}}},
		{`{"time":"2026-01-01T12:00:00Z","tenant":"acme","begin_only":false}`, requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "acme"}}},
		{`  {"tenant":"b","time":"2026-01-01T13:00:00+01:00","actual":{"cost":0}}  `, requestlog.Record{Time: shadowtest.T0, Request: admission.Request{Tenant: "b"}, Actual: admission.Usage{CostKnown: true}}},
	}
	for _, tt := range tests {
		var got requestlog.Record
		if err := requestlog.ParseRecord([]byte(strings.TrimSpace(tt.line)), &got); err != nil {
			t.Errorf("ParseRecord(%s) = %v", tt.line, err)
			continue
		}
		if !got.Time.Equal(tt.want.Time) {
			t.Errorf("ParseRecord(%s).Time = %v; want %v", tt.line, got.Time, tt.want.Time)
		}
		got.Time = tt.want.Time
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRecord(%s) = %+v; want %+v", tt.line, got, tt.want)
		}
		// The written form parses back to the same record.
		var back requestlog.Record
		if err := requestlog.ParseRecord(got.AppendJSON(nil), &back); err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("ParseRecord(AppendJSON(%+v)) = %+v, %v", got, back, err)
		}
	}
}

func TestRecordRequestAndUsage(t *testing.T) {
	r := requestlog.Record{Request: admission.Request{Tenant: "acme", Tokens: 100, Cost: 7}, Actual: admission.Usage{TokensKnown: true}}
	req := r.Request
	if req.Amount(limits.UnitRequests) != 1 || req.Amount(limits.UnitTokens) != 100 || req.Amount(limits.UnitCost) != 7 {
		t.Errorf("Request() = %+v", req)
	}
	if u := r.Actual; !u.TokensKnown || u.Tokens != 0 || u.CostKnown {
		t.Errorf("Usage() = %+v; want tokens known as 0, cost unknown", u)
	}
}

// The log reader reports every malformed record with its line number and
// goes on with the next line.
func TestLogReaderMalformed(t *testing.T) {
	f, err := os.Open("testdata/malformed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lr := requestlog.NewReader(f)
	var out bytes.Buffer
	var rec requestlog.Record
	for {
		err := lr.Read(&rec)
		if errors.Is(err, io.EOF) {
			break
		}
		var re *requestlog.RecordError
		switch {
		case errors.As(err, &re):
			if re.Line != lr.Line() {
				t.Errorf("RecordError.Line = %d; reader at line %d", re.Line, lr.Line())
			}
			out.WriteString(strings.ReplaceAll(err.Error(), "\n", "\n    ") + "\n")
		case err != nil:
			t.Fatal(err)
		default:
			out.Write(rec.AppendJSON([]byte("ok:   ")))
			out.WriteString("\n")
		}
	}
	shadowtest.Golden(t, "malformed.golden", out.Bytes())
}

func TestLogReaderLongLine(t *testing.T) {
	long := `{"time":"2026-01-01T12:00:00Z","tenant":"` + strings.Repeat("x", requestlog.MaxRecordBytes) + `"}`
	log := long + "\n" + `{"time":"2026-01-01T12:00:00Z","tenant":"acme"}` // no final newline
	lr := requestlog.NewReader(strings.NewReader(log))
	var rec requestlog.Record
	err := lr.Read(&rec)
	if err == nil || !strings.Contains(err.Error(), "line 1: record longer than") {
		t.Fatalf("Read(long line) = %v; want a line 1 error", err)
	}
	if err := lr.Read(&rec); err != nil || rec.Tenant != "acme" || lr.Line() != 2 {
		t.Fatalf("Read after a long line = %v, %q, line %d; want acme at line 2", err, rec.Tenant, lr.Line())
	}
	if err := lr.Read(&rec); !errors.Is(err, io.EOF) {
		t.Fatalf("Read at the end = %v; want io.EOF", err)
	}
}

func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{
		`{"time":"2026-01-01T12:00:00Z","tenant":"acme"}`,
		`{"time":"2026-01-01T12:00:00.25Z","tenant":"acme","key_id":"k","ip":"::1","operation":"op","model":"m","priority":-1,"tokens":1,"cost":2,"units":{"x":3},"actual":{"tokens":1,"cost":0,"units":{"x":1}},"duration":"1ms","sample":4}`,
		`{"time":"2026-01-01T12:00:00Z","tenant":"a","sample":-1}`, `{"time":"2026-01-01T12:00:00Z","tenant":"a","sample":1e3}`,
		`{"time":"2026-01-01T12:00:00Z","tenant":"a","operation":"op","begin_only":true}`, `{"time":"2026-01-01T12:00:00Z","tenant":"a","begin_only":true,"duration":"1s","actual":{}}`,
		`{"time":"9999-12-31T23:59:59.999999999-23:59","tenant":"\u0000\ud800"}`,
		`{"tenant":1}`, `[]`, `{`, `{"time":"2026-01-01T12:00:00Z","tenant":"a"} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var rec requestlog.Record
		if err := requestlog.ParseRecord(line, &rec); err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// A record that parses is written and read back unchanged.
		out := rec.AppendJSON(nil)
		var back requestlog.Record
		if err := requestlog.ParseRecord(out, &back); err != nil {
			t.Fatalf("ParseRecord(%s) (written from %q) = %v", out, line, err)
		}
		if !back.Time.Equal(rec.Time) {
			t.Fatalf("time %v became %v via %s", rec.Time, back.Time, out)
		}
		back.Time = rec.Time
		if !reflect.DeepEqual(back, rec) {
			t.Fatalf("record %+v became %+v via %s", rec, back, out)
		}
	})
}
