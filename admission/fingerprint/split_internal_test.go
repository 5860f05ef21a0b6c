package fingerprint

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzSplit: on a valid JSON object, split finds the model and the last
// MaxTail messages as encoding/json reads them (keys matched exactly, the
// last of a repeated key winning).
func FuzzSplit(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"a":1}]}`,
		`{"messages":[1,"x]",{"b":[{}]},null,true,-1.5e3],"model":"m","n":1}`,
		`{"m\u0065ssages":[{"a":"\"}"}],"model":"\u00e9"}`,
		`{"messages":[],"messages":[2]}`, `{"messages":{"a":1}}`, `{}`, `[]`, `{"a":1}`,
		`{"messages":[` + strings.Repeat(`{"i":1},`, 3*MaxTail) + `"last"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var top map[string]json.RawMessage
		if !json.Valid(body) || json.Unmarshal(body, &top) != nil {
			split(body) // no panic on anything
			return
		}
		var want []json.RawMessage
		_ = json.Unmarshal(top["messages"], &want)
		want = want[max(0, len(want)-MaxTail):]
		var wantModel string
		_ = json.Unmarshal(top["model"], &wantModel)
		model, got := split(body)
		if model != wantModel || len(got) != len(want) {
			t.Fatalf("split(%s) = %q, %d messages; want %q, %d", body, model, len(got), wantModel, len(want))
		}
		for i := range got {
			var a, b bytes.Buffer
			if json.Compact(&a, got[i]) != nil || json.Compact(&b, want[i]) != nil || a.String() != b.String() {
				t.Fatalf("split(%s): message %d = %s; want %s", body, i, got[i], want[i])
			}
		}
	})
}
