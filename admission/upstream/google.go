package upstream

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// GoogleError is what the error body of a Google API (the Gemini API,
// Vertex AI) says about the caller's limits: Google puts its retry delay
// and the quotas a request ran into in the body's details rather than in
// headers.
type GoogleError struct {
	// RetryAfter is the delay of the google.rpc.RetryInfo detail
	// ("retryDelay": "13s"), when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Quotas are the google.rpc.QuotaFailure violations whose quota
	// value was given, at most one per dimension (the tightest).
	Quotas []GoogleQuota
}

// A GoogleQuota is one quota a Google API said a request ran into.
type GoogleQuota struct {
	// Dimension is Requests for a quota on requests, Tokens for one on
	// tokens (Gemini's input tokens per minute).
	Dimension Dimension
	// Limit is the quota's value.
	Limit int64
}

// maxGoogleViolations bounds the quota violations read from one body.
const maxGoogleViolations = 16

// ParseGoogleError reads a Google API error body:
// {"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[...]}}
// with a type.googleapis.com/google.rpc.RetryInfo detail and
// google.rpc.QuotaFailure violations (quotaMetric, quotaId, quotaValue).
// A violation is on tokens when its metric or id names tokens, else on
// requests. Every value is untrusted: a delay that does not parse, is
// negative or above MaxReset, and a quota value that is not a whole
// number in [1, limits.MaxAmount], are ignored; ParseGoogleError never
// fails, and a body that is not a Google error says nothing.
func ParseGoogleError(body []byte) GoogleError {
	var v struct {
		Error struct {
			Details []struct {
				Type       string `json:"@type"`
				RetryDelay string `json:"retryDelay"`
				Violations []struct {
					QuotaMetric string          `json:"quotaMetric"`
					QuotaID     string          `json:"quotaId"`
					QuotaValue  json.RawMessage `json:"quotaValue"`
				} `json:"violations"`
			} `json:"details"`
		} `json:"error"`
	}
	var ge GoogleError
	if json.Unmarshal(body, &v) != nil {
		return ge
	}
	for _, d := range v.Error.Details {
		switch d.Type {
		case "type.googleapis.com/google.rpc.RetryInfo":
			if w, ok := parseGoogleDuration(d.RetryDelay); ok {
				ge.RetryAfter, ge.HasRetryAfter = w, true
			}
		case "type.googleapis.com/google.rpc.QuotaFailure":
			for i, q := range d.Violations {
				if i == maxGoogleViolations {
					break
				}
				n, ok := parseAmount(strings.Trim(string(q.QuotaValue), `"`))
				if !ok || n < 1 {
					continue
				}
				dim := Requests
				if strings.Contains(strings.ToLower(q.QuotaMetric+" "+q.QuotaID), "token") {
					dim = Tokens
				}
				ge.addQuota(GoogleQuota{Dimension: dim, Limit: n})
			}
		}
	}
	return ge
}

// addQuota keeps the tightest quota of each dimension.
func (ge *GoogleError) addQuota(q GoogleQuota) {
	for i := range ge.Quotas {
		if ge.Quotas[i].Dimension == q.Dimension {
			ge.Quotas[i].Limit = min(ge.Quotas[i].Limit, q.Limit)
			return
		}
	}
	ge.Quotas = append(ge.Quotas, q)
}

// parseGoogleDuration reads a protobuf Duration in its JSON form, seconds
// with an "s" suffix ("13s", "0.500s"), bounded by MaxReset.
func parseGoogleDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(s, "s")
	if !ok || len(num) == 0 || len(num) > maxValue {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || !(f >= 0) || f > MaxReset.Seconds() {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}
