package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/admission/upstream"
)

var _ upstream.Ledger = (*Store)(nil)

// ratioTTL is how long the accounting of a group no answer spoke about
// is kept: after an idle hour a group learns again from the start.
const ratioTTL = time.Hour

// ratioScript learns one answer's sample into the accounting kept in
// KEYS[1] as upstream's in-memory accounting does (see
// upstream.Accounting): the drop of the provider's remaining tokens
// since the latest report, less the refill in between, against the
// estimate sent, in sums decayed over Window answers; the ratio once 5
// answers are learned, within [Min, Max]; a refusal about tokens raises
// it at once to what the provider's remaining says it counts. An answer
// older than the latest report teaches nothing and is not kept.
//
// ARGV: the answer's instant in seconds and nanoseconds (two numbers,
// each exact in Lua's doubles, as one count of nanoseconds is not),
// remaining, limit, perNs, sent, throttled, tokensRefused, initial, min,
// max, window, ttl (ms). It returns the ratio, 0 while not learned, as a
// string (Lua's numbers reach Redis as integers).
var ratioScript = newScript(`
local h = redis.call('HMGET', KEYS[1], 'c', 's', 'n', 'r', 'as', 'an', 'rem', 'lim', 'pn')
local charged, sent, samples, ratio = tonumber(h[1]) or 0, tonumber(h[2]) or 0, tonumber(h[3]) or 0, tonumber(h[4]) or 0
local as, an, prem, plim, pperns = tonumber(h[5]), tonumber(h[6]) or 0, tonumber(h[7]) or 0, tonumber(h[8]) or 0, tonumber(h[9]) or 0
local ns, nn, rem, lim, perns = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n, throttled, refused = tonumber(ARGV[6]), ARGV[7] == '1', ARGV[8] == '1'
local initial, lo, hi, window = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local function f(x) return string.format('%.17g', x) end
local elapsed = 0
if as ~= nil then
	elapsed = (ns - as) * 1e9 + (nn - an)
	if elapsed < 0 then return f(ratio) end
end
if as ~= nil and n > 0 then
	local expected = prem + pperns * elapsed
	if plim > 0 then expected = math.min(expected, plim) end
	local accepted = n
	if throttled then accepted = 0 end
	local decay = 1 - 1 / window
	charged = charged * decay + (expected - rem)
	sent = sent * decay + accepted
	if accepted > 0 then samples = samples + 1 end
	if samples >= 5 and sent > 0 then ratio = math.min(math.max(charged / sent, lo), hi) end
end
if throttled and refused and n > 0 and rem > 0 then
	local cur = ratio
	if cur == 0 then cur = initial end
	local low = rem / n
	if low > cur then
		ratio = math.min(low, hi)
		charged = sent * ratio
	end
end
redis.call('HSET', KEYS[1], 'c', f(charged), 's', f(sent), 'n', samples, 'r', f(ratio), 'as', ARGV[1], 'an', ARGV[2], 'rem', f(rem), 'lim', f(lim), 'pn', f(perns))
redis.call('PEXPIRE', KEYS[1], ARGV[13])
return f(ratio)
`)

// LearnRatio implements upstream.Ledger: the accounting of key (an
// upstream account and a group) is kept in one hash, learned by one
// script per answer, so that every replica of a fleet learns from every
// answer and reserves at one ratio. The call is bounded by
// Config.Timeout and the breaker as the decisions' are, and reported to
// the observer as op "ratio".
func (s *Store) LearnRatio(ctx context.Context, key string, x upstream.RatioSample) (float64, error) {
	const op = "ratio"
	probe, ok := s.brk.allow()
	if !ok {
		return 0, s.refused(ctx, op, 1)
	}
	start := time.Now()
	deadline := start.Add(s.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	rkey := s.cfg.Prefix + "{" + Tag(key) + "}ratio"
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	args := []any{"evalsha", ratioScript.sha, 1, rkey,
		x.At / 1e9, x.At % 1e9, g(x.Remaining), g(x.Limit), g(x.PerNs), x.Sent, b(x.Throttled), b(x.TokensRefused),
		g(x.Initial), g(x.Min), g(x.Max), max(x.Window, 1), ratioTTL.Milliseconds()}
	cctx, cancel := context.WithDeadline(ctx, deadline)
	reply, err := s.client.Do(cctx, args...).Text()
	if noScript(err) {
		args[0], args[1] = "eval", ratioScript.src
		reply, err = s.client.Do(cctx, args...).Text()
	}
	cancel()
	s.judge(ctx, start, deadline, probe, err)
	if err := s.finish(ctx, op, 1, start, probe, err); err != nil {
		return 0, err
	}
	r, err := strconv.ParseFloat(reply, 64)
	if err != nil || !(r == 0 || r >= x.Min && r <= x.Max) {
		return 0, fmt.Errorf("redisstore: ratio: the script answered %q", reply)
	}
	return r, nil
}
