package gateway_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestBatchSDK: the official openai-go SDK uploads a batch input file,
// creates, retrieves and cancels batches through the gateway, reads the
// final usage, and gets the quota's refusal as an *openai.Error it does
// not retry.
func TestBatchSDK(t *testing.T) {
	s := batchGateway(t, `
policies:
  - {name: batch-tokens, key: [tenant], unit: tokens, algorithm: quota, period: day, limit: 700, match: {operations: ["POST /v1/batches"]}}
http: {quota_status: 429}
`, nil)
	ctx := ctxT(t, 20*time.Second)
	client := openai.NewClient(option.WithBaseURL(s.URL+"/v1"), option.WithAPIKey(keyA))
	f, err := client.Files.New(ctx, openai.FileNewParams{
		File: strings.NewReader(batchFile), Purpose: openai.FilePurposeBatch,
		ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 86400},
	})
	if err != nil {
		t.Fatal(err)
	}
	in, out, _ := s.reservation(t)
	if r := in + out; r > 700 || 2*r <= 700 || 280+r > 700 {
		t.Fatalf("the file reserves %d tokens; the test wants one batch in 700, not two, and one beside 280 settled", r)
	}
	params := openai.BatchNewParams{
		InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
		Metadata: map[string]string{"sim_input_tokens": "200", "sim_output_tokens": "80", "sim_cached_tokens": "20"},
	}
	b, err := client.Batches.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := s.remaining(t, "a"); tok != 700-in-out {
		t.Fatalf("after creation: %d tokens left; want %d", tok, 700-in-out)
	}
	// A second one does not fit today: refused at once, not retried.
	_, err = client.Batches.New(ctx, params)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "quota_exceeded" {
		t.Fatalf("second batch: %v; want a 429 quota_exceeded", err)
	}
	if n := s.creations(); n != 1 {
		t.Errorf("%d creations reached the upstream; want 1", n)
	}
	if b, err = client.Batches.Get(ctx, b.ID); err != nil || b.Status != openai.BatchStatusInProgress {
		t.Fatalf("retrieval: %v, %v; want in_progress", err, b)
	}
	s.clk.Advance(time.Hour)
	if b, err = client.Batches.Get(ctx, b.ID); err != nil || b.Status != openai.BatchStatusCompleted {
		t.Fatalf("retrieval after an hour: %v, %v; want completed", err, b)
	}
	if b.Usage.InputTokens != 200 || b.Usage.OutputTokens != 80 || b.Usage.InputTokensDetails.CachedTokens != 20 {
		t.Errorf("usage = %+v; want 200 in (20 cached), 80 out", b.Usage)
	}
	if tok, _ := s.remaining(t, "a"); tok != 700-280 {
		t.Errorf("after completion: %d tokens left; want %d", tok, 700-280)
	}
	// Now a second batch fits, and its tenant cancels it: refunded.
	b2, err := client.Batches.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if b2, err = client.Batches.Cancel(ctx, b2.ID); err != nil || b2.Status != openai.BatchStatusCancelling {
		t.Fatalf("cancel: %v, %v; want cancelling", err, b2)
	}
	s.clk.Advance(time.Hour)
	if b2, err = client.Batches.Get(ctx, b2.ID); err != nil || b2.Status != openai.BatchStatusCancelled {
		t.Fatalf("retrieval after the cancellation: %v, %v; want cancelled", err, b2)
	}
	// The simulator reports the metadata's usage for a cancelled batch
	// too: the requests it says were done are charged.
	if tok, _ := s.remaining(t, "a"); tok != 700-280-280 {
		t.Errorf("after the cancellation: %d tokens left; want %d", tok, 700-280-280)
	}
	other := openai.NewClient(option.WithBaseURL(s.URL+"/v1"), option.WithAPIKey(batchKeyB), option.WithMaxRetries(0))
	if _, err := other.Batches.Get(ctx, b.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's retrieval: %v; want 404", err)
	}
}
