package shadow_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/shadow"
)

func TestClip(t *testing.T) {
	long := strings.Repeat("é", shadow.MaxLogValue)
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"gpt-4o-mini", "gpt-4o-mini"},
		{"a\nb\x00c\x1b[31m", "a?b?c?[31m"},
		{"caf\xffé", "caf?é"},
		{"line\u2028sep", "line?sep"},
		{strings.Repeat("m", shadow.MaxLogValue), strings.Repeat("m", shadow.MaxLogValue)},
		{strings.Repeat("m", shadow.MaxLogValue+1), strings.Repeat("m", shadow.MaxLogValue-3) + "..."},
		{long, strings.Repeat("é", (shadow.MaxLogValue-3)/2) + "..."},
	} {
		got := shadow.Clip(tc.in)
		if got != tc.want {
			t.Errorf("Clip(%.40q) = %.40q; want %.40q", tc.in, got, tc.want)
		}
		if len(got) > shadow.MaxLogValue || !utf8.ValidString(got) {
			t.Errorf("Clip(%.40q) = %d bytes, valid UTF-8 %v; want at most %d valid bytes", tc.in, len(got), utf8.ValidString(got), shadow.MaxLogValue)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = shadow.Clip("gpt-4o-mini") }); n != 0 {
		t.Errorf("Clip of a short clean string allocates %v times; want 0", n)
	}
}

// A decision whose request strings are a megabyte each, full of characters
// that escaping multiplies, still makes one line of at most
// MaxDecisionBytes, in JSON and in text.
func TestDecisionLineIsBounded(t *testing.T) {
	huge := strings.Repeat("\"\\\x01\u2028", 1<<18)
	for name, mk := range map[string]func(*bytes.Buffer) slog.Handler{
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		l, err := shadow.NewLog(shadow.LogConfig{RejectSample: 1}, shadow.WithLogger(slog.New(mk(&buf))))
		if err != nil {
			t.Fatal(err)
		}
		l.Decision(&admission.Decision{
			Status:  admission.Status{Policy: huge, Unit: limits.UnitTokens, Limit: 1 << 50},
			Outcome: admission.Rejected, Reason: admission.ReasonRate,
			Tenant: huge, Operation: huge, Model: huge, Cost: -1 << 62, RetryAfter: limits.Never,
		})
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s: %d lines; want 1", name, len(lines))
		}
		if n := len(lines[0]); n > shadow.MaxDecisionBytes {
			t.Errorf("%s: the decision line is %d bytes; want at most %d", name, n, shadow.MaxDecisionBytes)
		}
		if !strings.Contains(lines[0], "...") {
			t.Errorf("%s: the line does not mark the cut values: %.200s", name, lines[0])
		}
	}
}

// BoundedHandler clips messages, strings, errors and groups.
func TestBoundedHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(shadow.NewBoundedHandler(slog.NewJSONHandler(&buf, nil)))
	big := strings.Repeat("x", 1<<20)
	log.With("pre", big).WithGroup("g").Error(big, "s", big, "err", errors.New(big), slog.Group("in", "v", big), "n", 42)
	line := buf.String()
	if n := len(line); n > 2*shadow.MaxDecisionBytes {
		t.Errorf("a record of megabyte values is %d bytes", n)
	}
	for _, want := range []string{`"n":42`, `"in":{"v":"xxx`, `"err":"xxx`} {
		if !strings.Contains(line, want) {
			t.Errorf("the record lacks %s: %.300s", want, line)
		}
	}
}

// Whatever a client sends, Clip gives at most MaxLogValue bytes of valid
// UTF-8 without control characters, and leaves short clean text alone.
func FuzzClip(f *testing.F) {
	for _, s := range []string{"", "gpt-4o", "a\nb", "caf\xffé", strings.Repeat("é", 300), "\u2028\x7f\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := shadow.Clip(s)
		if len(got) > shadow.MaxLogValue || !utf8.ValidString(got) {
			t.Fatalf("Clip(%q) = %q: %d bytes, valid %v", s, got, len(got), utf8.ValidString(got))
		}
		for _, r := range got {
			if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '\u2028' || r == '\u2029' {
				t.Fatalf("Clip(%q) = %q keeps %U", s, got, r)
			}
		}
		if len(s) <= shadow.MaxLogValue && got != s && strings.IndexFunc(s, func(r rune) bool {
			return r == utf8.RuneError || r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '\u2028' || r == '\u2029'
		}) < 0 {
			t.Fatalf("Clip(%q) = %q; want it unchanged", s, got)
		}
	})
}
