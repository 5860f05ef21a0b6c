package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/limits"
	"github.com/sluicehq/sluice/examples/llmproxy/gateway"
	"github.com/sluicehq/sluice/examples/llmproxy/upstream"
	"github.com/sluicehq/sluice/shadow/requestlog"
)

// responsesPolicy limits the Responses API by a daily token quota per
// tenant, 429 when exhausted.
const responsesPolicy = `
policies:
  - {name: resp-tokens, key: [tenant], unit: tokens, algorithm: quota, period: day, limit: 200k, match: {operations: ["POST /v1/responses"]}}
http: {quota_status: 429}
`

// responsesStack is batchGateway serving the Responses API, background
// responses completing after an hour, its request log at log.
func responsesStack(t *testing.T, policy string, tune func(*gatewaySetup, *upstream.Config)) (*batchStack, *requestlog.Writer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "requests.jsonl")
	rl, err := requestlog.NewWriter(requestlog.WriterConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	s := batchGateway(t, policy, func(gc *gatewaySetup, sc *upstream.Config) {
		sc.OutputTokens, sc.BackgroundDelay = 20, time.Hour
		gc.opts = append(gc.opts, gateway.WithRequestLog(rl))
		if tune != nil {
			tune(gc, sc)
		}
	})
	return s, rl, path
}

// logged closes the gateway servers srvs, which waits for every handler
// to return (a request is logged when it has ended, which can be after
// its client read the last byte of its answer), then the request log,
// and returns its records of operation op ("" for all), in order.
func logged(t *testing.T, rl *requestlog.Writer, path, op string, srvs ...*httptest.Server) []requestlog.Record {
	t.Helper()
	if len(srvs) == 0 {
		t.Fatal("logged needs the gateway's servers, to wait for their handlers")
	}
	for _, srv := range srvs {
		srv.Close()
	}
	if err := rl.Close(); err != nil {
		t.Fatal(err)
	}
	return readLog(t, path, op)
}

// readLog returns the records of operation op of the request log at
// path, in order.
func readLog(t *testing.T, path, op string) []requestlog.Record {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	lr := requestlog.NewReader(fh)
	var out []requestlog.Record
	for {
		var rec requestlog.Record
		err := lr.Read(&rec)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if op == "" || rec.Operation == op {
			out = append(out, rec)
		}
	}
}

// TestResponsesSDK: the official openai-go SDK, unmodified, creates
// responses through the gateway, streamed and not, chains one on another
// (reserved at least the chain the gateway recorded), cannot retrieve
// another tenant's response (404, as an unknown id), creates a
// background response and polls it to completion (its reservation held
// until then, then settled at its usage), and gets the quota's refusal
// as an *openai.Error 429 it does not retry.
func TestResponsesSDK(t *testing.T) {
	s, rl, path := responsesStack(t, responsesPolicy, nil)
	ctx := ctxT(t, 20*time.Second)
	client := openai.NewClient(option.WithBaseURL(s.URL+"/v1"), option.WithAPIKey(keyA))

	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", Instructions: openai.String("Answer in one line."), MaxOutputTokens: openai.Int(100),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Name the largest moon of Saturn and say why it is remarkable.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.Status != responses.ResponseStatusCompleted || first.OutputText() == "" || first.Usage.OutputTokens != 20 {
		t.Fatalf("plain create: status %q, text %q, usage %+v", first.Status, first.OutputText(), first.Usage)
	}

	// Streamed: the deltas, then response.completed with the usage.
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(100),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Count to five.")},
	})
	var text strings.Builder
	var completed *responses.Response
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			r := ev.Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil || completed == nil || text.Len() == 0 || completed.Usage.OutputTokens != 20 {
		t.Fatalf("stream: err %v, text %q, completed %v", err, text.String(), completed)
	}

	// Chained on the first: the upstream reads the chain as input.
	chained, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(100), PreviousResponseID: openai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("And the second largest?")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if chained.Usage.InputTokens <= first.Usage.TotalTokens || chained.Usage.InputTokensDetails.CachedTokens != first.Usage.TotalTokens {
		t.Fatalf("chained usage %+v; want the chain of %d tokens read (cached)", chained.Usage, first.Usage.TotalTokens)
	}

	// Chained on the streamed one: its size was read from its events.
	if _, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(100), PreviousResponseID: openai.String(completed.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Now backwards.")},
	}); err != nil {
		t.Fatal(err)
	}

	// Another tenant: a 404 for the first's id, as for an id nobody has.
	other := openai.NewClient(option.WithBaseURL(s.URL+"/v1"), option.WithAPIKey(batchKeyB), option.WithMaxRetries(0))
	var theirs, unknown *openai.Error
	if _, err := other.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); !errors.As(err, &theirs) || theirs.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's retrieval: %v; want 404", err)
	}
	if _, err := other.Responses.Get(ctx, "resp-nobody", responses.ResponseGetParams{}); !errors.As(err, &unknown) || unknown.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown id's retrieval: %v; want 404", err)
	}
	if theirs.Type != unknown.Type || theirs.Code != unknown.Code || strings.ReplaceAll(theirs.Message, first.ID, "X") != strings.ReplaceAll(unknown.Message, "resp-nobody", "X") {
		t.Errorf("another tenant's response: %+v; an unknown one: %+v; want the same answer", theirs, unknown)
	}
	for _, f := range []func() error{
		func() error { return other.Responses.Delete(ctx, first.ID) },
		func() error { _, err := other.Responses.Cancel(ctx, first.ID); return err },
		func() error {
			_, err := other.Responses.InputItems.List(ctx, first.ID, responses.InputItemListParams{})
			return err
		},
	} {
		if err := f(); !errors.As(err, &theirs) || theirs.StatusCode != http.StatusNotFound {
			t.Errorf("another tenant's call on a response: %v; want 404", err)
		}
	}
	// Its owner reads it and its input items.
	if got, err := client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); err != nil || got.ID != first.ID {
		t.Fatalf("owner's retrieval: %v, %v", err, got)
	}
	items, err := client.Responses.InputItems.List(ctx, first.ID, responses.InputItemListParams{Limit: openai.Int(10)})
	if err != nil || len(items.Data) != 1 {
		t.Fatalf("input items: %v, %+v", err, items)
	}

	// Background: queued at once, reserved until it completes.
	bg, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(100), Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a haiku about tides.")},
	})
	if err != nil || bg.Status != responses.ResponseStatusQueued {
		t.Fatalf("background create: %v, %v", err, bg)
	}
	before := s.remainingOf(t, "a", "POST /v1/responses", "resp-tokens")
	if got, err := client.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{}); err != nil || got.Status != responses.ResponseStatusInProgress {
		t.Fatalf("background poll: %v, %v; want in_progress", err, got)
	}
	if now := s.remainingOf(t, "a", "POST /v1/responses", "resp-tokens"); now != before {
		t.Fatalf("a running background response's reservation moved: %d then %d tokens left", before, now)
	}
	s.clk.Advance(time.Hour)
	done, err := client.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
	if err != nil || done.Status != responses.ResponseStatusCompleted || done.Usage.TotalTokens == 0 {
		t.Fatalf("background poll after an hour: %v, %v; want completed", err, done)
	}
	after := s.remainingOf(t, "a", "POST /v1/responses", "resp-tokens")

	// A call larger than the whole quota: 429 at once, never retried.
	_, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o-mini", MaxOutputTokens: openai.Int(300_000),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a very long story.")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "quota_exceeded" {
		t.Fatalf("over the quota: %v; want a 429 quota_exceeded", err)
	}

	recs := logged(t, rl, path, "POST /v1/responses", s.srv)
	if len(recs) != 6 { // plain, stream, chained twice, background, refused
		t.Fatalf("%d records of POST /v1/responses; want 6", len(recs))
	}
	ratio := func(r requestlog.Record) float64 { return float64(r.Tokens) / float64(r.Actual.Tokens) }
	plain, chain, bgRec := recs[0], recs[2], recs[4]
	if chain.Tokens < first.Usage.TotalTokens {
		t.Errorf("the chained call reserved %d tokens; want at least the recorded chain, %d", chain.Tokens, first.Usage.TotalTokens)
	}
	for _, r := range recs[2:4] {
		if r.Tokens >= gateway.DefaultUnknownChainTokens {
			t.Errorf("a chained call reserved %d tokens: priced as an unknown chain, not from its record", r.Tokens)
		}
	}
	if recs[3].Tokens < completed.Usage.TotalTokens {
		t.Errorf("the call chained on a stream reserved %d tokens; want at least the recorded chain, %d", recs[3].Tokens, completed.Usage.TotalTokens)
	}
	for _, r := range []requestlog.Record{plain, chain} {
		if r.Actual.Tokens <= 0 || r.Tokens < r.Actual.Tokens {
			t.Errorf("reserved %d tokens for a call that used %d: an estimate below the usage", r.Tokens, r.Actual.Tokens)
		}
	}
	if bgRec.Actual.Tokens != done.Usage.TotalTokens || after-before != bgRec.Tokens-done.Usage.TotalTokens {
		t.Errorf("background settled at %d tokens (refund %d); want its usage %d (refund %d)", bgRec.Actual.Tokens, after-before, done.Usage.TotalTokens, bgRec.Tokens-done.Usage.TotalTokens)
	}
	// The prompt: the input_tokens unit and the part read from the
	// cache, which the units count apart.
	input := func(us []admission.UnitAmount) (n int64) {
		for _, u := range us {
			if u.Unit == limits.UnitInputTokens || u.Unit == limits.UnitCachedInputTokens {
				n += u.Amount
			}
		}
		return n
	}
	for _, c := range []struct {
		name string
		r    requestlog.Record
	}{{"plain", plain}, {"chained", chain}, {"background", bgRec}} {
		in, actualIn := input(c.r.Units), input(c.r.Actual.Units)
		t.Logf("%s: reserved %d tokens, used %d: %.2f; input reserved %d, used %d: %.2f",
			c.name, c.r.Tokens, c.r.Actual.Tokens, ratio(c.r), in, actualIn, float64(in)/float64(actualIn))
		if in < actualIn {
			t.Errorf("%s: input reserved %d tokens; used %d", c.name, in, actualIn)
		}
	}
}

// remainingOf returns what tenant has left of policy, for a request of
// operation op.
func (s *batchStack) remainingOf(t *testing.T, tenant, op, policy string) int64 {
	t.Helper()
	tk, err := s.ctl.TryAdmit(context.Background(), admission.Request{Tenant: tenant, Operation: op, Model: "gpt-4o-mini"})
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Done()
	for _, st := range tk.Statuses(nil) {
		if st.Policy == policy {
			return st.Remaining
		}
	}
	t.Fatalf("no status of policy %s", policy)
	return 0
}
