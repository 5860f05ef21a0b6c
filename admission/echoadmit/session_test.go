package echoadmit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/echoadmit"
	"github.com/sluicehq/sluice/admission/limits"
)

// TestEchoSession: behind echo too, the session header keys a session
// policy under the tenant, and an invalid id is a 400, not a 401.
func TestEchoSession(t *testing.T) {
	srv := newServer(t, echoadmit.Config{}, admission.Policy{
		Name: "session-calls", Key: []limits.KeyPart{limits.KeyTenant, limits.KeySession},
		Algorithm: limits.Quota, Limit: 1, Per: 24 * time.Hour,
	})
	for i, s := range []struct {
		session string
		want    int
	}{{"run-1", 200}, {"run-1", 403}, {"run-2", 200}, {"", 200}, {"run 3", 400}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/items/1", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		if s.session != "" {
			req.Header.Set("X-Session-Id", s.session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != s.want {
			t.Errorf("request %d (session %q): status %d; want %d", i, s.session, resp.StatusCode, s.want)
		}
	}
}
