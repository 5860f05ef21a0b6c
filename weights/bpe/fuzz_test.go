package bpe

import (
	"strings"
	"testing"
)

// maxFuzzInput bounds the bytes of one fuzz input compared. The
// reference's cost grows faster than the input: 3 KB of invalid bytes
// take it 0.4 s for the two encodings, 1 KB 0.1 s, and minimizing one new
// input runs it up to -fuzzminimizetime times (make fuzz: 200), so that a
// larger bound once kept a bounded run minimizing for over nine minutes.
const maxFuzzInput = 1 << 10

// FuzzCountMatchesTiktoken compares both encodings with tiktoken-go on
// arbitrary bytes: the split, the tokens and the count must all agree.
// Bounded run:
//
//	go test -run '^$' -fuzz FuzzCountMatchesTiktoken -fuzztime 20000x ./weights/bpe
//
// (an execution count: under a duration Go's fuzz coordinator can fail a
// run that found nothing, golang/go#75804).
func FuzzCountMatchesTiktoken(f *testing.F) {
	for _, text := range corpus(f) {
		for _, line := range strings.SplitAfter(text, "\n") {
			f.Add([]byte(line))
		}
	}
	for _, s := range []string{"", " ", "\r\n\t \n", "'S'll'RE", "ǅǅaʰA'd", "<|endoftext|>", "\xed\xa0\x80\xff", "a\u0301\u0301 \u0301"} {
		f.Add([]byte(s))
	}
	es := encodings(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		// The reference, tiktoken-go's regexp2 split, is quadratic on long
		// unbroken runs (64 KiB of one letter takes seconds): inputs are
		// cut at maxFuzzInput so every comparison stays fast and a bounded
		// run makes steady progress. Long texts are covered by the corpus
		// and generated-case tests.
		b = b[:min(len(b), maxFuzzInput)]
		for _, e := range es {
			check(t, e, string(b))
		}
	})
}
