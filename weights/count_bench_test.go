package weights_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/sluicehq/sluice/weights/bpe"
)

// Token counting benchmarks: this package's exact counter (weights/bpe) side
// by side with its peer and reference, tiktoken-go with the offline loader.
//
//	go test -run '^$' -bench 'Count' -benchmem ./weights

var countBenchEncodings = []struct{ short, name string }{
	{"o200k", bpe.O200kBase},
	{"cl100k", bpe.Cl100kBase},
}

var countBenchSizes = []struct {
	label string
	n     int
}{{"1KB", 1 << 10}, {"16KB", 16 << 10}, {"256KB", 256 << 10}}

var countPeers = sync.OnceValue(func() map[string]*tiktoken.Tiktoken {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	m := map[string]*tiktoken.Tiktoken{}
	for _, e := range countBenchEncodings {
		tk, err := tiktoken.GetEncoding(e.name)
		if err != nil {
			panic(err)
		}
		m[e.name] = tk
	}
	return m
})

// countBenchText returns n bytes (cut back to a rune boundary) of text built from
// the corpus files: English chat paragraphs in a shuffled order when mixed is
// false, every language, code and JSON file of the corpus otherwise.
func countBenchText(b *testing.B, n int, mixed bool) string {
	b.Helper()
	pattern := "bpe/testdata/corpus/english.txt"
	if mixed {
		pattern = "bpe/testdata/corpus/*"
	}
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		b.Fatalf("no corpus at %s: %v", pattern, err)
	}
	slices.Sort(files)
	var parts []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		if mixed {
			parts = append(parts, string(data))
		} else {
			parts = append(parts, strings.SplitAfter(string(data), "\n\n")...)
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	var sb strings.Builder
	for sb.Len() < n {
		if !mixed {
			rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		}
		for _, p := range parts {
			sb.WriteString(p)
		}
	}
	s := sb.String()[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func BenchmarkPeerTiktokenCount(b *testing.B) {
	for _, e := range countBenchEncodings {
		for _, size := range countBenchSizes {
			b.Run("enc="+e.short+"/size="+size.label, func(b *testing.B) {
				benchPeerCount(b, e.name, countBenchText(b, size.n, false))
			})
		}
	}
}

func BenchmarkCount(b *testing.B) {
	for _, e := range countBenchEncodings {
		for _, size := range countBenchSizes {
			b.Run("enc="+e.short+"/size="+size.label, func(b *testing.B) {
				benchBPECount(b, e.name, countBenchText(b, size.n, false))
			})
		}
	}
}

func BenchmarkPeerTiktokenCountMixed(b *testing.B) {
	b.Run("enc=o200k", func(b *testing.B) {
		benchPeerCount(b, bpe.O200kBase, countBenchText(b, 64<<10, true))
	})
}

func BenchmarkCountMixed(b *testing.B) {
	b.Run("enc=o200k", func(b *testing.B) {
		benchBPECount(b, bpe.O200kBase, countBenchText(b, 64<<10, true))
	})
}

func benchPeerCount(b *testing.B, name, text string) {
	tk := countPeers()[name]
	want, err := bpe.Get(name)
	if err != nil {
		b.Fatal(err)
	}
	n := len(tk.Encode(text, nil, nil))
	if got := want.CountString(text); got != n {
		b.Fatalf("bpe %s counts %d tokens, tiktoken-go %d", name, got, n)
	}
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n = len(tk.Encode(text, nil, nil))
	}
	b.ReportMetric(float64(n), "tokens")
}

func benchBPECount(b *testing.B, name, text string) {
	e, err := bpe.Get(name)
	if err != nil {
		b.Fatal(err)
	}
	buf := []byte(text)
	n := e.Count(buf)
	if want := len(countPeers()[name].Encode(text, nil, nil)); n != want {
		b.Fatalf("bpe %s counts %d tokens, tiktoken-go %d", name, n, want)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n = e.Count(buf)
	}
	b.ReportMetric(float64(n), "tokens")
}
