package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestParseResponsesRequest: the members the estimator leaves are read
// exactly as the API names them, and every other member is skipped; a
// bad value, a repeated member or a case variant is refused with the
// member named.
func TestParseResponsesRequest(t *testing.T) {
	tests := []struct {
		body  string
		want  responsesRequest
		param string // the member refused; "" with bad for a body that is not an object
		bad   bool
	}{
		{`{"model":"m","input":"hi"}`, responsesRequest{}, "", false},
		{`{"previous_response_id":"resp_abc-1","input":[]}`, responsesRequest{previous: "resp_abc-1"}, "", false},
		{`{"previous_response_id":null,"background":null,"tools":null,"conversation":null}`, responsesRequest{}, "", false},
		{`{"prev\u0069ous_response_id":"resp_1"}`, responsesRequest{previous: "resp_1"}, "", false},
		{`{"background":true}`, responsesRequest{background: true}, "", false},
		{`{"conversation":"conv_1"}`, responsesRequest{conversation: true}, "", false},
		{`{"conversation":{"id":"conv_1"}}`, responsesRequest{conversation: true}, "", false},
		{`{"tools":[{"type":"web_search"},{"type":"web_search_preview_2025_03_11"},{"type":"file_search","vector_store_ids":["vs_1"]},{"type":"function","name":"f"}]}`,
			responsesRequest{webSearch: 2, fileSearch: 1}, "", false},
		{`{"metadata":{"previous_response_id":"x"},"text":{"background":1}}`, responsesRequest{}, "", false},
		{`{"previous_response_id":"../files/x"}`, responsesRequest{}, "previous_response_id", true},
		{`{"previous_response_id":"` + strings.Repeat("a", 129) + `"}`, responsesRequest{}, "previous_response_id", true},
		{`{"previous_response_id":""}`, responsesRequest{}, "previous_response_id", true},
		{`{"previous_response_id":7}`, responsesRequest{}, "previous_response_id", true},
		{`{"previous_response_id":"a","previous_response_id":"b"}`, responsesRequest{}, "previous_response_id", true},
		{`{"Previous_Response_ID":"resp_1"}`, responsesRequest{}, "previous_response_id", true},
		{`{"BACKGROUND":true}`, responsesRequest{}, "background", true},
		{`{"background":"yes"}`, responsesRequest{}, "background", true},
		{`{"tools":{"type":"web_search"}}`, responsesRequest{}, "tools", true},
		{`{"tools":["web_search"]}`, responsesRequest{}, "tools", true},
		{`[]`, responsesRequest{}, "", true},
		{`{"background":true`, responsesRequest{}, "", true},
		{`{"background":true} {}`, responsesRequest{}, "", true},
	}
	for _, tt := range tests {
		got, err := parseResponsesRequest([]byte(tt.body))
		var be *errResponsesBody
		switch {
		case tt.bad && (err == nil || !errorsAs(err, &be) || be.param != tt.param):
			t.Errorf("parseResponsesRequest(%s) = %+v, %v; want refused on %q", tt.body, got, err, tt.param)
		case !tt.bad && (err != nil || got != tt.want):
			t.Errorf("parseResponsesRequest(%s) = %+v, %v; want %+v", tt.body, got, err, tt.want)
		}
	}
}

func errorsAs(err error, be **errResponsesBody) bool {
	e, ok := err.(*errResponsesBody)
	*be = e
	return ok
}

// FuzzParseResponsesRequest: the parser never panics, accepts only valid
// JSON objects, and what it accepts agrees with encoding/json: the
// previous response id is the member's decoded value (a valid id), and
// background is its boolean.
func FuzzParseResponsesRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","previous_response_id":"resp_1","background":true,"tools":[{"type":"web_search"}]}`,
		`{"prev\u0069ous_response_id":"r"}`, `{"conversation":{"id":"c"}}`, `{"tools":[{"type":"file_search"},1]}`,
		`{"background":null}`, `{}`, `[]`, `{"a":"\ud800"}`, `{"previous_response_id":"a\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseResponsesRequest(body)
		if err != nil {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		var v map[string]json.RawMessage
		if json.Unmarshal(body, &v) != nil {
			t.Fatalf("accepted %q, which is not an object", body)
		}
		if r.previous != "" && !ValidObjectID(r.previous) {
			t.Fatalf("accepted previous_response_id %q", r.previous)
		}
		var exact struct {
			Previous   *string `json:"previous_response_id"`
			Background *bool   `json:"background"`
		}
		// encoding/json folds case; the parser refuses case variants, so
		// what it accepted reads the same both ways.
		if json.Unmarshal(body, &exact) == nil {
			if (exact.Previous != nil && *exact.Previous != r.previous) || (exact.Previous == nil && r.previous != "") {
				t.Fatalf("%q: previous %q; encoding/json reads %v", body, r.previous, exact.Previous)
			}
			if (exact.Background != nil && *exact.Background) != r.background {
				t.Fatalf("%q: background %v; encoding/json reads %v", body, r.background, exact.Background)
			}
		}
	})
}

// TestInputItemsQuery: the listing's query is rebuilt from the
// parameters it knows, each checked; anything else is refused.
func TestInputItemsQuery(t *testing.T) {
	for _, tt := range []struct {
		q, want string
		ok      bool
	}{
		{"", "", true},
		{"limit=10&order=asc&after=msg_1", "after=msg_1&limit=10&order=asc", true},
		{"include[]=file_search_call.results&include[]=message.input_image.image_url", "include%5B%5D=file_search_call.results&include%5B%5D=message.input_image.image_url", true},
		{"limit=0", "", false}, {"limit=101", "", false}, {"limit=1&limit=2", "", false},
		{"order=random", "", false}, {"after=../x", "", false}, {"include[]=A", "", false},
		{"stream=true", "", false}, {"api-version=1", "", false},
	} {
		q, _ := url.ParseQuery(tt.q)
		got, ok := inputItemsQuery(q)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("inputItemsQuery(%q) = %q, %v; want %q, %v", tt.q, got, ok, tt.want, tt.ok)
		}
	}
}

// TestToolFees: a thousand calls cost prices.tool_calls in US dollars,
// or the defaults; the sum saturates.
func TestToolFees(t *testing.T) {
	f := &config.File{}
	if got := feesOf(f); got != (toolFees{webSearch: 10_000, fileSearch: 2_500}) {
		t.Errorf("default fees = %+v; want 10000 and 2500 µ$ a call", got)
	}
	f.Prices.ToolCalls = map[string]float64{config.ToolWebSearch: 25, config.ToolFileSearch: 0}
	fees := feesOf(f)
	if fees != (toolFees{webSearch: 25_000}) {
		t.Errorf("configured fees = %+v; want 25000 and 0 µ$ a call", fees)
	}
	if got := fees.micros(3, 7); got != 75_000 {
		t.Errorf("micros(3, 7) = %d; want 75000", got)
	}
	if got := fees.micros(math.MaxInt64, 1); got != math.MaxInt64 {
		t.Errorf("micros(MaxInt64, 1) = %d; want saturated", got)
	}
}

// TestResponseRecords: both record stores, in memory and on a real
// redis-server, keep a tenant's records apart from another's, replace a
// record, forget one, and stay within their bounds per tenant and
// overall, forgetting the oldest first.
func TestResponseRecords(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	for _, tc := range []struct {
		name string
		new  func(max, per int) responseRecords
	}{
		{"memory", func(max, per int) responseRecords { return newMemRecords(max, per) }},
		{"redis", func(max, per int) responseRecords {
			if err := c.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return &redisRecords{c: c, max: max, perTenant: per, ttl: DefaultResponseRecordTTL}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rs := tc.new(5, 3)
			has := func(tenant, id string, want int64, found bool) {
				t.Helper()
				n, ok, err := rs.get(ctx, tenant, id)
				if err != nil || ok != found || (found && n != want) {
					t.Errorf("get(%s, %s) = %d, %v, %v; want %d, %v", tenant, id, n, ok, err, want, found)
				}
			}
			put := func(tenant, id string, n int64) {
				t.Helper()
				if err := rs.put(ctx, tenant, id, n); err != nil {
					t.Fatal(err)
				}
			}
			put("a", "r1", 100)
			has("a", "r1", 100, true)
			has("b", "r1", 0, false) // another tenant's
			put("a", "r1", 150)      // replaced
			has("a", "r1", 150, true)
			put("a", "r2", 2)
			put("a", "r3", 3)
			put("a", "r4", 4) // a's fourth: r1 goes
			has("a", "r1", 0, false)
			has("a", "r4", 4, true)
			put("b", "r5", 5)
			put("b", "r6", 6)
			put("b", "r7", 7) // six in all: the oldest, a's r2, goes
			has("a", "r2", 0, false)
			for _, id := range []string{"r3", "r4"} {
				has("a", id, int64(id[1]-'0'), true)
			}
			for _, id := range []string{"r5", "r6", "r7"} {
				has("b", id, int64(id[1]-'0'), true)
			}
			if err := rs.forget(ctx, "a", "r3"); err != nil {
				t.Fatal(err)
			}
			has("a", "r3", 0, false)
			// Many more: the bounds hold.
			for i := range 50 {
				put(fmt.Sprint("t", i%4), fmt.Sprint("x", i), int64(i))
			}
			n := 0
			for i := range 50 {
				if _, ok, _ := rs.get(ctx, fmt.Sprint("t", i%4), fmt.Sprint("x", i)); ok {
					n++
				}
			}
			if n > 5 || n == 0 {
				t.Errorf("%d of 50 records kept; want at most 5, the newest", n)
			}
			has("t1", "x49", 49, true)
			if tc.name == "redis" {
				if l, _ := c.LLen(ctx, recordsOrder).Result(); l > 10 {
					t.Errorf("the order list holds %d entries; want at most twice the records", l)
				}
			}
		})
	}
}

// TestOutputOf: the output of a response object is read as its item
// count and the texts its items carry; members of another type (a
// hostile upstream's) are skipped, never a panic.
func TestOutputOf(t *testing.T) {
	for _, tc := range []struct {
		data  string
		items int
		texts []string
	}{
		{`{"output":[]}`, 0, nil},
		{`{"output":null}`, 0, nil},
		{`{"output":"text"}`, 0, nil},
		{`not json`, 0, nil},
		{`{"output":[{"type":"message","content":[{"type":"output_text","text":"Hello"},{"type":"refusal","refusal":"No"}]}]}`, 1, []string{"Hello", "No"}},
		{`{"output":[{"type":"function_call","arguments":"{\"a\":1}"},{"type":"reasoning","summary":[{"type":"summary_text","text":"Think"}]}]}`, 2, []string{`{"a":1}`, "Think"}},
		{`{"output":[1,"x",null,{"content":"x"},{"content":[{"text":7},5]},{"arguments":{}}]}`, 6, nil},
	} {
		items, texts := outputOf([]byte(tc.data))
		if items != tc.items || !slices.Equal(texts, tc.texts) {
			t.Errorf("outputOf(%s) = %d, %q; want %d, %q", tc.data, items, texts, tc.items, tc.texts)
		}
	}
}
