package weights

import (
	"fmt"
	"math"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/sluicehq/sluice/weights/bpe"
)

// Encoding names a byte-pair-encoding vocabulary, as tiktoken spells it.
type Encoding string

// The encodings used by current OpenAI models.
const (
	// O200kBase is the vocabulary of the gpt-4o, gpt-4.1, gpt-4.5, gpt-5 and
	// o-series families.
	O200kBase Encoding = "o200k_base"
	// Cl100kBase is the vocabulary of gpt-4, gpt-3.5-turbo and the
	// text-embedding-3 and text-embedding-ada-002 models.
	Cl100kBase Encoding = "cl100k_base"
)

// Valid reports whether e is an encoding this package can count.
func (e Encoding) Valid() bool { return e == O200kBase || e == Cl100kBase }

// Counter counts the tokens a text encodes to in one encoding. Text that
// looks like a special token (for example "<|endoftext|>") is counted as
// plain text, which is how the API treats it inside message content.
// Implementations must be safe for concurrent use and must not panic on any
// input, including invalid UTF-8.
type Counter interface {
	Count(text string) int
}

// CounterSource returns the Counter for an encoding. It is called once per
// encoding by an [Estimator] and the result is kept, so a source may do
// expensive set-up (loading ranks) on first use. It must be safe for
// concurrent use.
type CounterSource func(Encoding) (Counter, error)

// defaultCounters is the CounterSource used when [Config.Counters] is nil:
// the allocation-free exact counter of package weights/bpe.
var defaultCounters CounterSource = BPECounter

// BPECounter returns a Counter backed by package weights/bpe, an exact
// reimplementation of the same encodings that counts without allocating.
// Its ranks load once per process, on first use.
func BPECounter(enc Encoding) (Counter, error) {
	e, err := bpe.Get(string(enc))
	if err != nil {
		return nil, fmt.Errorf("weights: loading %s: %w", enc, err)
	}
	return bpeCounter{e}, nil
}

type bpeCounter struct{ e *bpe.Encoding }

func (c bpeCounter) Count(text string) int { return c.e.CountString(text) }

// TiktokenCounter returns a Counter backed by github.com/pkoukk/tiktoken-go,
// with the vocabulary read from the ranks embedded by
// github.com/pkoukk/tiktoken-go-loader (nothing is downloaded). The encoder
// for each encoding is built once per process, on first use (about 60 ms for
// cl100k_base and 160 ms for o200k_base), and shared by every caller.
func TiktokenCounter(enc Encoding) (Counter, error) {
	t, err := tiktokenEncoder(enc)
	if err != nil {
		return nil, err
	}
	return tiktokenCounter{t}, nil
}

type tiktokenCounter struct{ t *tiktoken.Tiktoken }

// Count implements Counter with EncodeOrdinary, which never panics on
// special-token text (Encode does when such text is disallowed).
func (c tiktokenCounter) Count(text string) int {
	if text == "" {
		return 0
	}
	return len(c.t.EncodeOrdinary(text))
}

var (
	loaderOnce sync.Once
	tiktokens  [2]struct {
		once sync.Once
		t    *tiktoken.Tiktoken
		err  error
	}
)

// tiktokenEncoder returns the shared tiktoken-go encoder for enc, building it
// on first use with the offline loader.
func tiktokenEncoder(enc Encoding) (*tiktoken.Tiktoken, error) {
	var i int
	switch enc {
	case O200kBase:
		i = 0
	case Cl100kBase:
		i = 1
	default:
		return nil, fmt.Errorf("weights: unknown encoding %q", string(enc))
	}
	loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	s := &tiktokens[i]
	s.once.Do(func() {
		s.t, s.err = tiktoken.GetEncoding(string(enc))
		if s.err != nil {
			s.err = fmt.Errorf("weights: loading %s: %w", enc, s.err)
		}
	})
	return s.t, s.err
}

// ratioCounter estimates tokens from a calibrated number of characters
// (Unicode code points) per token, for models whose tokenizer is not
// available.
type ratioCounter struct{ charsPerToken float64 }

func (c ratioCounter) Count(text string) int {
	if text == "" {
		return 0
	}
	t := int(math.Ceil(float64(utf8.RuneCountInString(text)) / c.charsPerToken))
	if t < 1 {
		t = 1
	}
	return t
}

// scaledCounter counts with an exact tokenizer and scales the count by a
// calibrated factor, for a model family whose own tokenizer is not public
// (see [ModelRule].TokenScale).
type scaledCounter struct {
	c     Counter
	scale float64
}

func (c scaledCounter) Count(text string) int {
	return int(scaleCount(int64(c.c.Count(text)), c.scale))
}

// scaleCount returns n × scale rounded up, n itself for a scale of 0 or 1,
// saturating at MaxTokens.
func scaleCount(n int64, scale float64) int64 {
	if scale <= 0 || scale == 1 || n <= 0 {
		return n
	}
	return int64(math.Ceil(min(float64(n)*scale, MaxTokens)))
}

// maxChunk bounds the text handed to a Counter in one call. tiktoken-go's
// merge step is quadratic in the length of a pre-tokenised piece: 64 KiB of
// one repeated letter takes seconds, a cheap way to burn a gateway's CPU.
// countText therefore cuts long text into chunks of at most maxChunk bytes.
const maxChunk = 1 << 10

// countText counts the tokens of s with c, maxChunk bytes at a time. Chunks
// end where the tokenizer splits anyway (see safeCut), so the count is exact
// for any text with a space at least every maxChunk bytes: every natural
// language, including Chinese and Japanese paragraphs, which are cut at
// their spaces or are shorter. A longer run without one (base64, a repeated
// character) is cut at a character boundary, which can add one token per
// cut.
func countText(c Counter, s string) int {
	n := 0
	for len(s) > maxChunk {
		cut := safeCut(s, maxChunk)
		n += c.Count(s[:cut])
		s = s[cut:]
	}
	return n + c.Count(s)
}

// safeCut returns where to cut s, at or before limit: before the last space
// that follows a non-white-space character. No pre-tokenisation piece of
// o200k_base or cl100k_base spans such a position (a space only ever starts
// a piece), so counting both sides apart gives the same total. Without one,
// it cuts at the last character boundary.
func safeCut(s string, limit int) int {
	for i := limit; i > 0; i-- {
		if s[i] == ' ' {
			if r, _ := utf8.DecodeLastRuneInString(s[:i]); !unicode.IsSpace(r) {
				return i
			}
		}
	}
	for i := limit; i > limit-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return i
		}
	}
	return limit
}
