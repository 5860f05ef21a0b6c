package gateway

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseMCP: what the gateway spends on a POST body before it
// is admitted or refused: an ordinary tool call, a batch of 10,000 calls
// (refused at its 17th message) and JSON nested 200,000 deep in the
// arguments (refused by the decoder's depth bound).
func BenchmarkParseMCP(b *testing.B) {
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"query":"x"}}}`
	var batch strings.Builder
	batch.WriteString("[")
	for i := range 10_000 {
		if i > 0 {
			batch.WriteString(",")
		}
		fmt.Fprintf(&batch, call, i)
	}
	batch.WriteString("]")
	deep := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":` + strings.Repeat("[", 200_000) + strings.Repeat("]", 200_000) + `}}}`
	for _, bc := range []struct {
		name, body string
		ok         bool
	}{
		{"call", fmt.Sprintf(call, 1), true},
		{"batch10000", batch.String(), false},
		{"deep200000", deep, false},
	} {
		body := []byte(bc.body)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, _, err := parseMCP(body, DefaultMCPMaxBatch); (err == nil) != bc.ok {
					b.Fatalf("parseMCP = %v", err)
				}
			}
		})
	}
}
