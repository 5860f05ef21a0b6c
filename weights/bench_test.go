package weights

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/benchcpu"
)

// Benchmarks of the estimate against its peer, in one run:
//
//	go test -run '^$' -bench 'PeerTiktokenEncode|EstimateChat' -benchmem ./weights/
//
// Both report MB/s over the same prompt text (English chat text), so the
// ratio of their ns/op is the cost of parsing and the chat format on top of
// tokenising (1KB, 16KB, exact) or the saving of sampling (256KB, above the
// default threshold). cpu-ns/op is the process CPU time per operation, the
// figure to compare on a machine shared with other work.

var benchSizes = []struct {
	name string
	n    int
}{{"1KB", 1 << 10}, {"16KB", 16 << 10}, {"256KB", 256 << 10}}

// benchText is the prompt text of a size: English chat text.
func benchText(n int) string { return corpusText(englishCorpus, n, 42) }

// BenchmarkPeerTiktokenEncode is the peer: tiktoken-go's Encode (o200k_base)
// of the prompt text alone, no JSON and no chat format.
func BenchmarkPeerTiktokenEncode(b *testing.B) {
	tk, err := tiktokenEncoder(O200kBase)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range benchSizes {
		text := benchText(s.n)
		b.Run("size="+s.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			cpu := benchcpu.Start()
			for b.Loop() {
				if len(tk.Encode(text, nil, nil)) == 0 {
					b.Fatal("no tokens")
				}
			}
			cpu.Report(b)
		})
	}
}

// benchChatBody is a gpt-4o chat request whose four messages hold text,
// split at paragraph boundaries.
func benchChatBody(b *testing.B, text string) []byte {
	paras := strings.SplitAfter(text, "\n\n")
	parts := make([]string, 4)
	for i, p := range paras {
		parts[i*4/len(paras)] += p
	}
	roles := []string{"user", "assistant", "user", "assistant"}
	var msgs []map[string]string
	for i, p := range parts {
		if p != "" {
			msgs = append(msgs, map[string]string{"role": roles[i], "content": p})
		}
	}
	return chatBody(b, "gpt-4o", msgs, map[string]any{"max_completion_tokens": 1000})
}

// BenchmarkEstimateChat is the full estimate with the default Config: JSON
// parse, tokenising (sampled at 256KB) and the chat format's overheads. The
// 256KB case reports its error against the exact count as err%.
func BenchmarkEstimateChat(b *testing.B) { benchEstimateChat(b, Config{}) }

// BenchmarkEstimateChatTiktoken is the same estimate counting with
// tiktoken-go (Config.Counters = TiktokenCounter), the reference the default
// counter replaces.
func BenchmarkEstimateChatTiktoken(b *testing.B) {
	benchEstimateChat(b, Config{Counters: TiktokenCounter})
}

func benchEstimateChat(b *testing.B, cfg Config) {
	e, err := NewEstimator(cfg)
	if err != nil {
		b.Fatal(err)
	}
	exact, err := NewEstimator(Config{SampleThreshold: -1})
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range benchSizes {
		text := benchText(s.n)
		body := benchChatBody(b, text)
		b.Run("size="+s.name, func(b *testing.B) {
			want, err := exact.Estimate("/v1/chat/completions", body)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			var est Estimate
			cpu := benchcpu.Start()
			for b.Loop() {
				est, err = e.Estimate("/v1/chat/completions", body)
				if err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b)
			if est.Sampled {
				b.ReportMetric(100*math.Abs(float64(est.InputTokens-want.InputTokens))/float64(want.InputTokens), "err%")
			} else if est.InputTokens != want.InputTokens {
				b.Fatalf("exact path: %d tokens; want %d", est.InputTokens, want.InputTokens)
			}
		})
	}
}

// BenchmarkStreamReader measures the SSE pass-through: a 1,000-chunk chat
// stream read in 4 KiB reads, with usage at the end.
func BenchmarkStreamReader(b *testing.B) {
	words := strings.SplitAfter(benchText(6<<10), " ")
	in := chatStream(words[:min(len(words), 1000)], testUsage, true, "\n")
	buf := make([]byte, 4<<10)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		s := NewStreamReader(bytes.NewReader(in), StreamConfig{})
		for {
			if _, err := s.Read(buf); err != nil {
				break
			}
		}
		if !s.Result().Reported {
			b.Fatal("no usage")
		}
	}
}

// BenchmarkOperationCost is one lookup in an operation cost table.
func BenchmarkOperationCost(b *testing.B) {
	t, err := NewOperationCosts(1, []OperationCost{
		{Method: "POST", Route: "/v1/exports", Units: 50},
		{Route: "/v1/items/{id}", Units: 1},
		{Route: "/v1/admin/*", Units: 10},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if t.Cost("POST", "/v1/exports") != 50 {
			b.Fatal("wrong cost")
		}
	}
}
