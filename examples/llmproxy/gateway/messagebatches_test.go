package gateway_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// messageBatchPolicy reserves message batches on a daily token quota and
// a monthly spend quota per tenant.
const messageBatchPolicy = `
policies:
  - {name: batch-tokens, key: [tenant], unit: tokens, algorithm: quota, period: day, limit: 2000, match: {operations: ["POST /v1/messages/batches"]}}
  - {name: batch-spend, key: [tenant], unit: cost, algorithm: quota, period: month, limit: 1M, match: {operations: ["POST /v1/messages/batches"]}}
http: {quota_status: 429}
`

// messageBatchRemaining returns what tenant has left of the message
// batch quotas.
func (s *batchStack) messageBatchRemaining(t *testing.T, tenant string) (tokens, cost int64) {
	t.Helper()
	return s.quotasLeft(t, tenant, "POST /v1/messages/batches", "claude-sonnet-4-5")
}

// messageBatchParams is a batch of n requests for model, each of
// maxTokens.
func messageBatchParams(model string, n int, maxTokens int64) anthropic.MessageBatchNewParams {
	var p anthropic.MessageBatchNewParams
	for i := range n {
		p.Requests = append(p.Requests, anthropic.MessageBatchNewParamsRequest{
			CustomID: "req-" + strconv.Itoa(i),
			Params: anthropic.MessageBatchNewParamsRequestParams{
				Model: anthropic.Model(model), MaxTokens: maxTokens,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Summarise the plot of Hamlet in " + strconv.Itoa(i+2) + " sentences."))},
			},
		})
	}
	return p
}

// TestMessageBatchesSDK: the official anthropic-sdk-go, unmodified,
// creates, retrieves, lists, cancels and reads the results of message
// batches through the gateway. A creation is reserved its requests'
// prompts and max_tokens; once the batch ended it is settled at the usage
// its results report (refunded whole when cancelled before any ran);
// another tenant sees none of it; a batch the quota cannot hold is a
// RateLimitError, and one that mixes models or streams a 400.
func TestMessageBatchesSDK(t *testing.T) {
	s := batchGateway(t, messageBatchPolicy, nil)
	ctx := ctxT(t, 20*time.Second)
	client := anthropic.NewClient(option.WithBaseURL(s.URL+"/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	full, _ := s.messageBatchRemaining(t, "a")

	b, err := client.Messages.Batches.New(ctx, messageBatchParams("claude-sonnet-4-5", 3, 100))
	if err != nil {
		t.Fatal(err)
	}
	if b.ProcessingStatus != anthropic.MessageBatchProcessingStatusInProgress || !strings.HasPrefix(b.ID, "msgbatch_") {
		t.Fatalf("created %+v; want a batch in progress", b)
	}
	reserved, spend := s.messageBatchRemaining(t, "a")
	in := full - reserved - 300
	if in <= 0 || spend >= 1_000_000 {
		t.Fatalf("after creation: %d tokens and %d spend left of %d and 1M; want the prompts and 3×100 output tokens reserved, and a cost", reserved, spend, full)
	}

	// Another tenant sees none of it.
	other := anthropic.NewClient(option.WithBaseURL(s.URL+"/"), option.WithAPIKey(batchKeyB), option.WithMaxRetries(0))
	var apiErr *anthropic.Error
	if _, err := other.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's retrieval: %v; want a 404", err)
	}
	if _, err := other.Messages.Batches.Cancel(ctx, b.ID, anthropic.MessageBatchCancelParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's cancellation: %v; want a 404", err)
	}
	if page, err := other.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{}); err != nil || len(page.Data) != 0 {
		t.Errorf("another tenant's list: %v, %d batches; want none", err, len(page.Data))
	}

	// Refused before anything is admitted: a batch of two models, one
	// that streams.
	mixed := messageBatchParams("claude-sonnet-4-5", 2, 10)
	mixed.Requests[1].Params.Model = "claude-haiku-4-5"
	if _, err := client.Messages.Batches.New(ctx, mixed); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "one batch per model") {
		t.Errorf("a batch of two models: %v; want a 400 naming one batch per model", err)
	}
	// One the day's quota cannot hold now (more than is left, less than
	// the whole): a RateLimitError, not retried.
	if over := reserved/3 + 1; 3*over+in >= full {
		t.Fatalf("the test wants a batch of 3×%d tokens to fit in %d, not in %d", over, full, reserved)
	}
	if _, err := client.Messages.Batches.New(ctx, messageBatchParams("claude-sonnet-4-5", 3, reserved/3+1)); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a batch over the quota: %v; want a 429", err)
	}
	// One that can never fit: a 400 that says to split it.
	if _, err := client.Messages.Batches.New(ctx, messageBatchParams("claude-sonnet-4-5", 3, full)); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "split it") {
		t.Fatalf("a batch over the whole quota: %v; want a 400", err)
	}
	if tok, _ := s.messageBatchRemaining(t, "a"); tok != reserved {
		t.Fatalf("refused batches took %d tokens", reserved-tok)
	}

	// An hour later the batch has ended: its results are read, and it is
	// settled at their usage.
	s.clk.Advance(time.Hour)
	got, err := client.Messages.Batches.Get(ctx, b.ID, anthropic.MessageBatchGetParams{})
	if err != nil || got.ProcessingStatus != anthropic.MessageBatchProcessingStatusEnded || got.RequestCounts.Succeeded != 3 {
		t.Fatalf("retrieval after an hour: %v, %+v; want ended, 3 succeeded", err, got)
	}
	if got.ResultsURL != "/v1/messages/batches/"+b.ID+"/results" {
		t.Errorf("results_url %q; want the gateway's own route", got.ResultsURL)
	}
	stream := client.Messages.Batches.ResultsStreaming(ctx, b.ID, anthropic.MessageBatchResultsParams{})
	var used int64
	n := 0
	for stream.Next() {
		r := stream.Current()
		if r.Result.Type != "succeeded" {
			t.Errorf("result %s: %s; want succeeded", r.CustomID, r.Result.Type)
		}
		u := r.Result.Message.Usage
		used += u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens + u.OutputTokens
		n++
	}
	if err := stream.Err(); err != nil || n != 3 || used == 0 {
		t.Fatalf("results: %v, %d results of %d tokens; want 3", err, n, used)
	}
	waitFor(t, "the batch settled at its results' usage", func() bool {
		tok, _ := s.messageBatchRemaining(t, "a")
		return tok == full-used
	})
	t.Logf("message batch: reserved %d tokens (%d prompt + 300 max_tokens), used %d", full-reserved, in, used)

	// The owner's list holds its batch; a cancelled batch is refunded.
	if page, err := client.Messages.Batches.List(ctx, anthropic.MessageBatchListParams{}); err != nil || len(page.Data) != 1 || page.Data[0].ID != b.ID {
		t.Errorf("the owner's list: %v, %+v; want its one batch", err, page)
	}
	c2, err := client.Messages.Batches.New(ctx, messageBatchParams("claude-sonnet-4-5", 2, 100))
	if err != nil {
		t.Fatal(err)
	}
	if c2, err = client.Messages.Batches.Cancel(ctx, c2.ID, anthropic.MessageBatchCancelParams{}); err != nil || c2.ProcessingStatus != anthropic.MessageBatchProcessingStatusCanceling {
		t.Fatalf("cancel: %v, %+v; want canceling", err, c2)
	}
	s.clk.Advance(time.Hour)
	if c2, err = client.Messages.Batches.Get(ctx, c2.ID, anthropic.MessageBatchGetParams{}); err != nil || c2.RequestCounts.Canceled != 2 {
		t.Fatalf("after the cancellation: %v, %+v; want ended, 2 canceled", err, c2)
	}
	waitFor(t, "the cancelled batch refunded", func() bool {
		tok, _ := s.messageBatchRemaining(t, "a")
		return tok == full-used
	})
	if _, err := client.Messages.Batches.Delete(ctx, c2.ID, anthropic.MessageBatchDeleteParams{}); err != nil {
		t.Errorf("deleting an ended batch: %v", err)
	}
}
