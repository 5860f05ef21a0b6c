package requestlog

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/internal/benchcpu"
)

// The fast decoder accepts only records encoding/json decodes, and
// decodes them the same way.
func FuzzFastMatchesJSON(f *testing.F) {
	for _, s := range []string{
		`{"time":"2026-01-01T12:00:00Z","tenant":"acme"}`,
		`{"time":"t","tenant":"a","key_id":"k","user":"u","session":"s","ip":"::1","operation":"op","model":"m","priority":-1,"tokens":1,"cost":2,"units":{"x":3},"actual":{"tokens":1,"cost":0,"units":{"x":1}},"duration":"1ms","sample":10}`,
		`{"sample":9223372036854775807}`, `{"sample":1,"sample":2}`, `{"session":"a","session":"b"}`, `{"fingerprint":"00112233445566778899aabbccddeeff"}`, `{"fingerprint":"xyz"}`,
		`{"begin_only":true}`, `{"begin_only":false}`, `{"begin_only":tru}`, `{"begin_only":1}`, `{"begin_only":true,"begin_only":false}`,
		`{"units":{"a":1},"units":{"b":2}}`, `{"actual":{"tokens":1},"actual":{"cost":2}}`,
		`{"tokens":-9223372036854775808}`, `{"tokens":9223372036854775807}`, `{"tokens":01}`, `{"tokens":1.0}`,
		` { "tenant" : "é" } `, `{"Tenant":"a"}`, `{"tenant":"a\u0041"}`, `{"tenant":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		var fast recordJSON
		if !parseFast(line, &fast, func(b []byte) string { return string(b) }) {
			return
		}
		var slow recordJSON
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&slow); err != nil {
			t.Fatalf("parseFast accepted %q; encoding/json: %v", line, err)
		}
		if dec.More() {
			t.Fatalf("parseFast accepted %q with trailing data", line)
		}
		for _, p := range []**string{&fast.Time, &fast.Tenant} {
			if *p != nil {
				v := **p
				*p = &v
			}
		}
		fast.timeVal, fast.tenantVal = "", ""
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: parseFast = %+v; encoding/json = %+v", line, fast, slow)
		}
	})
}

// The fast decoder's strings and map keys are copies: the log reader
// reuses the line's buffer for the next line.
func TestFastCopiesWhatItKeeps(t *testing.T) {
	line := []byte(`{"time":"t","tenant":"acme","model":"m","units":{"x":1},"actual":{"units":{"y":2}}}`)
	var w recordJSON
	if !parseFast(line, &w, func(b []byte) string { return string(b) }) {
		t.Fatalf("parseFast(%s) = false", line)
	}
	for i := range line {
		line[i] = '#'
	}
	if *w.Time != "t" || *w.Tenant != "acme" || w.Model != "m" || w.Units["x"] != 1 || w.Actual == nil || w.Actual.Units["y"] != 2 {
		t.Errorf("after the line changed: %+v, actual %+v; want time t, tenant acme, model m, units x=1, actual units y=2", w, w.Actual)
	}
}

// BenchmarkParseFast decodes a record of the shape the request log
// writes, against its peer: encoding/json decoding the same record, the
// fallback of a record the fast decoder does not take.
func BenchmarkParseFast(b *testing.B) {
	line := []byte(`{"time":"2026-01-01T12:00:00.123Z","tenant":"t07","operation":"POST /v1/chat/completions","model":"m","tokens":1234,"cost":123,"actual":{"tokens":987},"duration":"1.234s"}`)
	var in interner
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		cpu := benchcpu.Start()
		for b.Loop() {
			var w recordJSON
			if !parseFast(line, &w, in.str) {
				b.Fatal("not parsed")
			}
		}
		cpu.Report(b)
	})
	b.Run("peer=encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(line)))
		b.ReportAllocs()
		cpu := benchcpu.Start()
		for b.Loop() {
			var w recordJSON
			if err := json.Unmarshal(line, &w); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
}
