package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/azure"
	"github.com/openai/openai-go/v3/option"
)

// Without --upstream the built-in simulator serves Azure OpenAI's paths:
// the official SDK's Azure option, pointed at the demo gateway with a
// demo key in api-key, gets a completion from a deployment of
// default.yaml, plain and streamed, with the gateway's limit headers; a
// deployment the file does not name is a 404 DeploymentNotFound.
func TestAzureWithSimulator(t *testing.T) {
	s := startProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := openai.NewClient(azure.WithEndpoint(s.URL, "2024-10-21"), azure.WithAPIKey("sk-demo-globex"), azure.WithUnsafeAllowHTTP(), option.WithMaxRetries(0))
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}
	var resp *http.Response
	c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "demo-chat", Messages: msgs}, option.WithResponseInto(&resp))
	if err != nil || c.Choices[0].Message.Content == "" || c.Usage.TotalTokens == 0 {
		t.Fatalf("completion: %v, %+v", err, c)
	}
	if resp.Header.Get("X-Ratelimit-Remaining-Tokens") == "" {
		t.Errorf("no limit headers on the answer: %v", resp.Header)
	}
	st := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "demo-chat", Messages: msgs})
	chunks := 0
	for st.Next() {
		chunks++
	}
	if err := st.Err(); err != nil || chunks < 2 {
		t.Fatalf("stream: %v after %d chunks", err, chunks)
	}
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "DeploymentNotFound" {
		t.Errorf("a model that is no deployment: %v; want 404 DeploymentNotFound", err)
	}
}
