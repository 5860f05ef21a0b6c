package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/sluicehq/sluice/internal/eventstream"
	"github.com/sluicehq/sluice/weights"
)

// The simulator serves the Converse API: an unsigned or badly signed
// request is refused with 403 in Bedrock's shape; a signed Converse
// answers its message and usage (the prompt up to the cache point
// written to the cache, or read from it with X-Sim-Cache: read);
// ConverseStream answers an event stream ending with messageStop and
// the metadata event's usage; a fault is a ThrottlingException; the
// writes are split by time to live in cacheDetails.
func TestBedrockSimulator(t *testing.T) {
	s := httptest.NewServer(New(Config{OutputTokens: 4, ChunkTokens: 1}))
	defer s.Close()
	const body = `{"system":[{"text":"Be brief."},{"cachePoint":{"type":"default"}}],"messages":[{"role":"user","content":[{"text":"Why is the sky blue?"}]}],"inferenceConfig":{"maxTokens":3}}`
	postBody := func(body, op string, sign bool, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/model/anthropic.claude-3-haiku-20240307-v1%3A0/"+op, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if sign {
			sum := sha256.Sum256([]byte(body))
			creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}
			if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "bedrock", "us-east-1", time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	post := func(op string, sign bool, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		return postBody(body, op, sign, hdr...)
	}

	for name, tc := range map[string]struct {
		sign bool
		hdr  []string
		typ  string
	}{
		"unsigned":  {false, nil, "MissingAuthenticationTokenException"},
		"malformed": {false, []string{"Authorization", "AWS4-HMAC-SHA256 Credential=x, Signature=1", "X-Amz-Date", "20261201T090000Z"}, "InvalidSignatureException"},
	} {
		resp, b := post("converse", tc.sign, tc.hdr...)
		if resp.StatusCode != 403 || resp.Header.Get("X-Amzn-Errortype") != tc.typ || !strings.Contains(string(b), `"message"`) {
			t.Errorf("%s: %d %s %s; want 403 %s", name, resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), b, tc.typ)
		}
	}

	var one struct {
		Output struct {
			Message struct{ Content []struct{ Text string } }
		}
		StopReason string
		Usage      struct{ InputTokens, OutputTokens, TotalTokens, CacheReadInputTokens, CacheWriteInputTokens int }
	}
	for _, read := range []bool{false, true} {
		hdr := []string{}
		if read {
			hdr = []string{"X-Sim-Cache", "read"}
		}
		resp, b := post("converse", true, hdr...)
		if resp.StatusCode != 200 || json.Unmarshal(b, &one) != nil {
			t.Fatalf("converse: %d %s", resp.StatusCode, b)
		}
		u := one.Usage
		cache := u.CacheWriteInputTokens
		if read {
			cache = u.CacheReadInputTokens
		}
		if one.StopReason != "max_tokens" || u.OutputTokens != 3 || cache != 3+3 || u.CacheReadInputTokens+u.CacheWriteInputTokens != cache || u.InputTokens == 0 ||
			u.TotalTokens != u.InputTokens+u.OutputTokens+cache || len(one.Output.Message.Content) != 1 {
			t.Errorf("converse (cache read %v): %s; want 3 tokens (max_tokens), the system prompt cached", read, b)
		}
	}

	resp, b := post("converse-stream", true)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("converse-stream: %d %s", resp.StatusCode, resp.Header)
	}
	d := eventstream.NewDecoder(1 << 20)
	d.Feed(b)
	var events []string
	var usage string
	for m, ok := d.Next(); ok; m, ok = d.Next() {
		events = append(events, m.Get(":event-type"))
		if m.Get(":event-type") == "metadata" {
			usage = string(m.Payload)
		}
	}
	want := "messageStart contentBlockDelta contentBlockDelta contentBlockDelta contentBlockStop messageStop metadata"
	if strings.Join(events, " ") != want || d.Err() != nil || d.Pending() != 0 || !strings.Contains(usage, `"outputTokens":3`) {
		t.Errorf("stream events %q (%v), usage %s; want %s", events, d.Err(), usage, want)
	}

	resp, b = post("converse", true, "X-Sim-Fault", "429")
	if resp.StatusCode != 429 || resp.Header.Get("X-Amzn-Errortype") != "ThrottlingException" {
		t.Errorf("fault 429: %d %s %s; want a ThrottlingException", resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), b)
	}

	// A one-hour cache point, then a five-minute one: the prompt up to
	// the first (3 + 3 tokens) is written for an hour, the text between
	// them (7 tokens) for five minutes, in cacheDetails, 1h first; the
	// message ("user", "Why?": 3 + 1 + 1) and the reply's 3 are not cached.
	const ttls = `{"system":[{"text":"Be brief."},{"cachePoint":{"type":"default","ttl":"1h"}},{"text":"Answer in one line, please."},{"cachePoint":{"type":"default","ttl":"5m"}}],"messages":[{"role":"user","content":[{"text":"Why?"}]}]}`
	resp, b = postBody(ttls, "converse", true)
	rep, err := weights.ReadUsage(b)
	wantUsage := weights.Usage{InputTokens: 13 + 3 + 1 + 1 + 3, OutputTokens: 4, CacheWriteInputTokens: 13, CacheWrite1hInputTokens: 6}
	if resp.StatusCode != 200 || err != nil || rep.Usage != wantUsage ||
		!strings.Contains(string(b), `"cacheDetails":[{"inputTokens":6,"ttl":"1h"},{"inputTokens":7,"ttl":"5m"}]`) {
		t.Errorf("one-hour cache point: %d %s, usage %+v (%v); want %+v", resp.StatusCode, b, rep.Usage, err, wantUsage)
	}
	resp, b = postBody(ttls, "converse", true, "X-Sim-Cache", "read")
	if rep, _ := weights.ReadUsage(b); resp.StatusCode != 200 || rep.Usage.CachedInputTokens != 13 || rep.Usage.CacheWriteInputTokens != 0 || strings.Contains(string(b), "cacheDetails") {
		t.Errorf("one-hour cache point, read: %d %s; want 13 tokens read, no writes", resp.StatusCode, b)
	}
}
