package weights

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// Usage is what a request actually cost, as the upstream reported it (or as
// counted from a stream that ended without a report, see Estimated).
type Usage struct {
	// InputTokens is the prompt size: prompt_tokens in the Chat
	// Completions, Completions and Embeddings APIs, input_tokens in the
	// Responses API; in Anthropic's Messages API, whose input_tokens
	// leaves the cache out, input_tokens + cache_creation_input_tokens +
	// cache_read_input_tokens. It includes CachedInputTokens and
	// CacheWriteInputTokens.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens is the completion size: completion_tokens or
	// output_tokens. It includes ReasoningTokens.
	OutputTokens int64 `json:"output_tokens"`
	// CachedInputTokens is the part of InputTokens served from the
	// provider's prompt cache (prompt_tokens_details.cached_tokens,
	// input_tokens_details.cached_tokens, or Anthropic's
	// cache_read_input_tokens).
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	// CacheWriteInputTokens is the part of InputTokens written to the
	// provider's prompt cache, which Anthropic bills above the input
	// price (cache_creation_input_tokens).
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens,omitempty"`
	// CacheWrite1hInputTokens is the part of CacheWriteInputTokens
	// written to a one-hour cache, which Anthropic bills above a
	// five-minute write (Anthropic's
	// cache_creation.ephemeral_1h_input_tokens, Bedrock's cacheDetails
	// entries with a ttl of "1h"). The rest of the writes are five-minute
	// writes.
	CacheWrite1hInputTokens int64 `json:"cache_write_1h_input_tokens,omitempty"`
	// ReasoningTokens is the part of OutputTokens spent on hidden reasoning
	// (completion_tokens_details.reasoning_tokens or
	// output_tokens_details.reasoning_tokens).
	ReasoningTokens int64 `json:"reasoning_tokens,omitempty"`
	// Estimated reports that some figure is not the upstream's: it sent no
	// usage, or one that could not be used (see [UsageFallback]), and the
	// figure comes from the request's estimate or, for a stream, from
	// tokenising the streamed text (hidden reasoning tokens cannot be
	// counted this way).
	Estimated bool `json:"estimated,omitempty"`
}

// TotalTokens returns InputTokens + OutputTokens.
func (u Usage) TotalTokens() int64 { return satAdd(max(u.InputTokens, 0), max(u.OutputTokens, 0)) }

// UsageFallback says why the usage to charge for a request is not the
// figure its upstream reported. Upstream usage is untrusted input: a
// provider's bug, a proxy in between or a compromised upstream could
// otherwise charge a tenant nothing, or lock it out for years. Its String
// form is a fixed, short label value for a metric.
type UsageFallback uint8

// The reasons a reported usage is not charged as is. In a [UsageReport]
// only FallbackNone, FallbackMissing, FallbackMalformed and
// FallbackNegative describe how a count was read; [Estimate.CheckUsage]
// adds the implausible ones.
const (
	// FallbackNone: the reported usage is charged as reported.
	FallbackNone UsageFallback = iota
	// FallbackMissing: the response has no usage object, or the object
	// lacks the prompt or the completion count.
	FallbackMissing
	// FallbackMalformed: a count is not a JSON number (a string, a
	// boolean, an object), or the usage is not a JSON object, or the
	// response body is not JSON at all.
	FallbackMalformed
	// FallbackNegative: a count is below zero.
	FallbackNegative
	// FallbackImplausibleInput: the prompt count is outside the plausible
	// range of the request (see [Estimate.CheckUsage]).
	FallbackImplausibleInput
	// FallbackImplausibleOutput: the completion count is outside the
	// plausible range of the request.
	FallbackImplausibleOutput
)

// String returns the reason as a metric label value: "none", "missing",
// "malformed", "negative", "implausible_input" or "implausible_output".
func (f UsageFallback) String() string {
	switch f {
	case FallbackNone:
		return "none"
	case FallbackMissing:
		return "missing"
	case FallbackMalformed:
		return "malformed"
	case FallbackNegative:
		return "negative"
	case FallbackImplausibleInput:
		return "implausible_input"
	case FallbackImplausibleOutput:
		return "implausible_output"
	}
	return "unknown"
}

// The plausible range of a reported usage, in tokens. See
// [Estimate.CheckUsage].
const (
	// UsageFactor bounds how far a count may stray from what the request
	// says of it: the prompt count is at most UsageFactor times the
	// estimate (plus UsageSlack), and a stream's completion count at least
	// the streamed text's tokens divided by UsageFactor. The estimate is
	// exact for text and within a few percent when sampled from ordinary
	// text, so a factor of 4 leaves room for tokenizers of other model
	// families (a text built to fool the samples is bounded by its size
	// instead, see [Estimate].MaxInputTokens). There is no
	// proportional lower bound on the prompt: content the estimate prices
	// by size (files, images behind URLs) can cost far less than priced,
	// so only a prompt of zero tokens, for a request that has one, is
	// implausible.
	UsageFactor = 4
	// UsageSlack is added to the upper bounds of both counts. It covers
	// what an estimate cannot see: items stored upstream
	// (previous_response_id, item_reference), files sent by id, the
	// results of built-in tools, models that bill images above the tile
	// formula, and the output of a request that set no limit of its own
	// (the reservation is then a default, and the largest published output
	// limits are about 128k tokens).
	UsageSlack = 1 << 17
)

// UsageReport is the usage an upstream response reported, as read and
// before it is checked against the request ([Estimate.CheckUsage]).
type UsageReport struct {
	// Usage holds the counts that were read. A count that is absent or
	// could not be used is zero; its state is in Input or Output. A count
	// above what an int64 holds (1e30) reads as math.MaxInt64, and a
	// fraction is rounded up.
	Usage Usage
	// Input says how the prompt count was read: FallbackNone when it was,
	// else FallbackMissing, FallbackMalformed or FallbackNegative.
	Input UsageFallback
	// Output says the same of the completion count.
	Output UsageFallback
}

// Found reports whether the upstream sent a usage object with at least a
// prompt or a completion count, usable or not.
func (r UsageReport) Found() bool { return r.Input != FallbackMissing || r.Output != FallbackMissing }

// noReport is the report of a response without usage.
var noReport = UsageReport{Input: FallbackMissing, Output: FallbackMissing}

// malformedReport is the report of a usage that is not a JSON object.
var malformedReport = UsageReport{Input: FallbackMalformed, Output: FallbackMalformed}

// ReadUsage reads the usage of a non-streaming response body of any of the
// endpoints listed at [Endpoint]: the top-level "usage" object or, for a
// Responses API event, "response.usage", or the Gemini API's
// "usageMetadata" (see [EndpointGenerateContent]). A bad count never fails it: it is
// recorded in the report, and [Estimate.CheckUsage] decides what to charge.
// The error is not nil only when the body is not a JSON object; the report
// then says the usage is malformed, so that checking it still charges the
// request's reservation.
func ReadUsage(body []byte) (UsageReport, error) {
	if firstByte(body) != '{' {
		return malformedReport, errors.New("weights: parsing response usage: want a JSON object")
	}
	rep, resp, err := findUsage(view(body))
	if err != nil {
		return malformedReport, fmt.Errorf("weights: parsing response usage: %w", err)
	}
	if rep == nil && strings.HasPrefix(resp, "{") {
		rep, _, _ = findUsage(resp)
	}
	return rep.report(), nil
}

// findUsage scans the JSON object v (checking all of it, as a parser
// would) for its "usage" member, read into a rawUsage (nil when absent or
// null), and returns the text of its "response" member. Keys match
// exactly, as the APIs write them; of repeated keys the last wins.
func findUsage(v string) (usage *rawUsage, response string, err error) {
	var s jsonscan.Scanner
	s.Reset(v)
	if s.Peek() != '{' {
		return nil, "", errors.New("want a JSON object")
	}
	var u rawUsage
	s.Open()
	for n := 0; s.More(&n, '}'); {
		switch memberKey(&s) {
		case "usage":
			if v := s.Value(); v == "null" {
				usage = nil
			} else {
				u.rep, usage = readUsageObject(v), &u
			}
		case "usageMetadata": // the Gemini API's
			if v := s.Value(); v == "null" {
				usage = nil
			} else {
				u.rep, usage = readGeminiUsage(v), &u
			}
		case "response":
			response = s.Value()
		default:
			s.Skip()
		}
	}
	if s.End(); s.Err() != nil {
		return nil, "", s.Err()
	}
	return usage, response, nil
}

// memberKey reads an object member's key, decoded when it has escapes.
func memberKey(s *jsonscan.Scanner) string {
	raw, dirty := s.Key()
	if !dirty {
		return raw
	}
	b, _ := jsonscan.AppendUnquote(nil, raw)
	return string(b)
}

// CheckUsage returns the usage to charge for a request estimated as e,
// given what its upstream reported, and why it differs from the report
// when it does (FallbackNone when it does not). It never returns a
// negative count, nor one above the plausible range:
//
//   - prompt tokens: from 1 (0 when e.InputTokens is 0) to
//     e.InputTokens × [UsageFactor] + [UsageSlack], or to
//     e.MaxInputTokens (a sampled estimate's bound) when that is larger;
//   - completion tokens: at most e.OutputTokens (the reservation: the
//     request's limit, or the model's default, times the completions asked
//     for) + UsageSlack.
//
// A count that is missing, malformed, negative or outside its range is
// replaced by the reservation's: e.InputTokens for the prompt,
// e.OutputTokens for the completion, so a bad report is charged as the
// admission reserved it, never as nothing. The one exception is a missing
// completion count when nothing was reserved for one (an embedding). When
// both counts are bad the reason is the prompt's. A prompt charged as
// reserved has no cached part and no cache writes, as the reservation
// had none. Cached and reasoning tokens are clamped to the counts they
// are part of (the one-hour cache writes to the writes). Pass the estimate as
// reserved: a caller that lowered OutputTokens (a cap on reservations) has
// lowered the fallback and the bound with it.
func (e Estimate) CheckUsage(r UsageReport) (Usage, UsageFallback) { return e.check(r, 0) }

// check is CheckUsage for a response whose output text was also counted:
// streamed tokens. The completion count is then also implausible below
// streamed / UsageFactor, its bound grows to at least streamed + UsageSlack, and its
// fallback is the larger of the reservation and streamed.
func (e Estimate) check(r UsageReport, streamed int64) (Usage, UsageFallback) {
	in, out, seen := max(e.InputTokens, 0), max(e.OutputTokens, 0), max(streamed, 0)
	u := r.Usage
	reason := FallbackNone
	fallBack := func(f UsageFallback) {
		if reason == FallbackNone {
			reason = f
		}
	}
	// A prompt charged as reserved is all uncached input, as the
	// reservation counted it: the cache figures of a report whose prompt
	// count cannot be used are no more trusted than the count.
	if st := countState(r.Input, u.InputTokens); st != FallbackNone {
		fallBack(st)
		u.InputTokens, u.CachedInputTokens, u.CacheWriteInputTokens, u.CacheWrite1hInputTokens = in, 0, 0, 0
	} else if u.InputTokens > max(satAdd(satMul(in, UsageFactor), UsageSlack), e.MaxInputTokens) || u.InputTokens < min(in, 1) {
		fallBack(FallbackImplausibleInput)
		u.InputTokens, u.CachedInputTokens, u.CacheWriteInputTokens, u.CacheWrite1hInputTokens = in, 0, 0, 0
	}
	outFallback := max(out, seen)
	if st := countState(r.Output, u.OutputTokens); st == FallbackMissing && outFallback == 0 {
		u.OutputTokens = 0
	} else if st != FallbackNone {
		fallBack(st)
		u.OutputTokens = outFallback
	} else if u.OutputTokens > satAdd(outFallback, UsageSlack) || u.OutputTokens < seen/UsageFactor {
		fallBack(FallbackImplausibleOutput)
		u.OutputTokens = outFallback
	}
	u.CachedInputTokens = min(max(u.CachedInputTokens, 0), u.InputTokens)
	u.CacheWriteInputTokens = min(max(u.CacheWriteInputTokens, 0), u.InputTokens-u.CachedInputTokens)
	u.CacheWrite1hInputTokens = min(max(u.CacheWrite1hInputTokens, 0), u.CacheWriteInputTokens)
	u.ReasoningTokens = min(max(u.ReasoningTokens, 0), u.OutputTokens)
	u.Estimated = u.Estimated || reason != FallbackNone
	return u, reason
}

// countState returns the state of a count: the state it was read with, or
// FallbackNegative for a negative value given by the caller.
func countState(st UsageFallback, v int64) UsageFallback {
	if st == FallbackNone && v < 0 {
		return FallbackNegative
	}
	return st
}

// rawUsage is a usage object in any of the APIs' shapes. It decodes any
// JSON value without failing, so a bad usage never hides the rest of a
// response or of a stream event.
type rawUsage struct{ rep UsageReport }

// UnmarshalJSON implements json.Unmarshaler; it never fails.
func (r *rawUsage) UnmarshalJSON(b []byte) error {
	r.rep = readUsageObject(view(b))
	return nil
}

// report returns what r read; a nil r is no usage at all.
func (r *rawUsage) report() UsageReport {
	if r == nil {
		return noReport
	}
	return r.rep
}

// readUsageObject reads the counts of a usage object, given as its JSON
// text, without building anything: a value that is not a JSON object is
// malformed. Keys match exactly; of repeated keys the last wins. Amazon
// Bedrock's Converse usage spells the counts in lowerCamelCase
// (inputTokens, outputTokens, totalTokens, cacheReadInputTokens,
// cacheWriteInputTokens, and cacheDetails for the writes by time to
// live, see readCacheTTLs). An Anthropic or Bedrock usage (one with
// cache_creation_input_tokens or cache_read_input_tokens, or their
// Bedrock spellings), whose input count leaves the cache out, counts its
// cache figures into the prompt, as the other APIs do, and reads the
// one-hour part of its writes (Anthropic's cache_creation breakdown,
// Bedrock's cacheDetails), at most the writes. A cache figure that cannot
// be used, that breakdown included, makes the prompt count unusable, so
// that the request is charged as reserved rather than as a cheaper prompt
// than it was.
func readUsageObject(v string) UsageReport {
	var s jsonscan.Scanner
	s.Reset(v)
	if s.Peek() != '{' {
		return malformedReport
	}
	var prompt, input, completion, output, total, cacheWrite, cacheRead, cacheTTL string
	ttlShape := 0
	var cached, reasoning int64
	s.Open()
	for n := 0; s.More(&n, '}'); {
		switch memberKey(&s) {
		case "prompt_tokens":
			prompt = s.Value()
		case "input_tokens", "inputTokens":
			input = s.Value()
		case "completion_tokens":
			completion = s.Value()
		case "output_tokens", "outputTokens":
			output = s.Value()
		case "total_tokens", "totalTokens":
			total = s.Value()
		case "cache_creation_input_tokens", "cacheWriteInputTokens":
			cacheWrite = s.Value()
		case "cache_read_input_tokens", "cacheReadInputTokens":
			cacheRead = s.Value()
		case "cache_creation":
			cacheTTL, ttlShape = s.Value(), anthropicTTLs
		case "cacheDetails":
			cacheTTL, ttlShape = s.Value(), bedrockTTLs
		case "prompt_tokens_details", "input_tokens_details":
			cached = max(cached, detail(s.Value(), "cached_tokens"))
		case "completion_tokens_details", "output_tokens_details":
			reasoning = max(reasoning, detail(s.Value(), "reasoning_tokens"))
		default:
			s.Skip()
		}
	}
	if s.Err() != nil {
		return malformedReport
	}
	var rep UsageReport
	rep.Usage.InputTokens, rep.Input = pick(prompt, input)
	rep.Usage.OutputTokens, rep.Output = pick(completion, output)
	if rep.Input == FallbackMissing && rep.Output == FallbackMissing {
		// Only a total: count it as input (embeddings-like), so nothing is
		// lost.
		rep.Usage.InputTokens, rep.Input = parseCount(total)
	}
	rep.Usage.CachedInputTokens, rep.Usage.ReasoningTokens = cached, reasoning
	if cacheWrite != "" || cacheRead != "" {
		written, wst := parseCount(cacheWrite)
		read, rst := parseCount(cacheRead)
		long, lst := readCacheTTLs(cacheTTL, ttlShape)
		for _, st := range [...]UsageFallback{wst, rst, lst} {
			if st != FallbackNone && st != FallbackMissing && rep.Input == FallbackNone {
				rep.Input = st
			}
		}
		rep.Usage.InputTokens = satAdd(satAdd(rep.Usage.InputTokens, written), read)
		rep.Usage.CachedInputTokens, rep.Usage.CacheWriteInputTokens = read, written
		rep.Usage.CacheWrite1hInputTokens = min(long, written)
	}
	return rep
}

// The shapes of a usage's breakdown of cache writes by time to live.
const (
	// anthropicTTLs is the Messages API's cache_creation object:
	// {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}.
	anthropicTTLs = iota + 1
	// bedrockTTLs is the Converse API's cacheDetails list:
	// [{"ttl": "1h", "inputTokens": 0}, {"ttl": "5m", "inputTokens": 0}].
	bedrockTTLs
)

// readCacheTTLs reads the one-hour part of a breakdown of cache writes
// by time to live (v, of the given shape: anthropicTTLs or
// bedrockTTLs). Absent or null is FallbackMissing (no one-hour writes,
// as before the APIs reported them); a breakdown that is not of its
// shape, or a count in it that is not a count, FallbackMalformed; a
// negative count FallbackNegative. A Bedrock entry whose ttl is neither
// "5m" nor "1h" (a longer time to live added later) counts as one-hour,
// the dearest write priced; the sum saturates.
func readCacheTTLs(v string, shape int) (int64, UsageFallback) {
	if v = strings.TrimSpace(v); v == "" || v == "null" {
		return 0, FallbackMissing
	}
	var s jsonscan.Scanner
	s.Reset(v)
	if shape == anthropicTTLs {
		return readTTLEntry(&s, "ephemeral_1h_input_tokens", "")
	}
	if s.Peek() != '[' {
		return 0, FallbackMalformed
	}
	var long int64
	s.Open()
	for n := 0; s.More(&n, ']'); {
		c, st := readTTLEntry(&s, "inputTokens", "ttl")
		if st != FallbackNone {
			return 0, st
		}
		long = satAdd(long, c)
	}
	if s.Err() != nil {
		return 0, FallbackMalformed
	}
	return long, FallbackNone
}

// readTTLEntry reads the object at s: the count under countKey when the
// object is a one-hour part (ttlKey is empty, or the object's ttl is not
// "5m"), else 0. A count that is absent or null is 0, as is an object
// with none.
func readTTLEntry(s *jsonscan.Scanner, countKey, ttlKey string) (int64, UsageFallback) {
	if s.Peek() != '{' {
		s.Skip()
		return 0, FallbackMalformed
	}
	var count, ttl string
	s.Open()
	for n := 0; s.More(&n, '}'); {
		switch memberKey(s) {
		case countKey:
			count = s.Value()
		case ttlKey:
			ttl = s.Value()
		default:
			s.Skip()
		}
	}
	if s.Err() != nil {
		return 0, FallbackMalformed
	}
	if ttlKey != "" && ttl == `"5m"` {
		return 0, FallbackNone
	}
	c, st := parseCount(count)
	if st == FallbackMissing {
		return 0, FallbackNone
	}
	return c, st
}

// merge returns the usage of a stream that reported r and then next: each
// side (the prompt with its cache figures, the completion with its
// reasoning) as next reports it, or as r did when next leaves it out.
// Anthropic reports the prompt when a message starts and the cumulative
// completion as it goes.
func (r UsageReport) merge(next UsageReport) UsageReport {
	if next.Input != FallbackMissing {
		r.Input = next.Input
		r.Usage.InputTokens, r.Usage.CachedInputTokens, r.Usage.CacheWriteInputTokens = next.Usage.InputTokens, next.Usage.CachedInputTokens, next.Usage.CacheWriteInputTokens
		r.Usage.CacheWrite1hInputTokens = next.Usage.CacheWrite1hInputTokens
	}
	if next.Output != FallbackMissing {
		r.Output = next.Output
		r.Usage.OutputTokens, r.Usage.ReasoningTokens = next.Usage.OutputTokens, next.Usage.ReasoningTokens
	}
	return r
}

// pick reads the first of two spellings of a count that is present.
func pick(a, b string) (int64, UsageFallback) {
	if n, st := parseCount(a); st != FallbackMissing {
		return n, st
	}
	return parseCount(b)
}

// detail reads a count of a details object, given as its JSON text, or 0
// when it is not usable.
func detail(v, key string) int64 {
	var s jsonscan.Scanner
	s.Reset(v)
	if s.Peek() != '{' {
		return 0
	}
	var count string
	s.Open()
	for n := 0; s.More(&n, '}'); {
		if memberKey(&s) == key {
			count = s.Value()
		} else {
			s.Skip()
		}
	}
	if n, st := parseCount(count); s.Err() == nil && st == FallbackNone {
		return n
	}
	return 0
}

// parseCount reads a token count in any JSON number form: 1000, 1e3,
// 1000.0, 999.5 (rounded up), 1e30 (read as math.MaxInt64, for the
// plausibility check to judge). Absent and null are FallbackMissing, any
// other JSON value FallbackMalformed, and a number below zero
// FallbackNegative; the count is then zero.
func parseCount(raw string) (int64, UsageFallback) {
	raw = strings.TrimSpace(raw)
	if len(raw) == 0 || raw == "null" {
		return 0, FallbackMissing
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		return 0, FallbackMalformed
	}
	if !strings.ContainsAny(raw, ".eE") {
		n, err := strconv.ParseInt(raw, 10, 64)
		switch {
		case err == nil && n >= 0:
			return n, FallbackNone
		case raw[0] == '-':
			return 0, FallbackNegative
		case errors.Is(err, strconv.ErrRange):
			return math.MaxInt64, FallbackNone
		}
		return 0, FallbackMalformed
	}
	f, err := strconv.ParseFloat(raw, 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), math.IsNaN(f):
		return 0, FallbackMalformed
	case f < 0:
		return 0, FallbackNegative
	case f >= math.MaxInt64:
		return math.MaxInt64, FallbackNone
	}
	return int64(math.Ceil(f)), FallbackNone
}
