package oteltrace_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/admission/oteltrace"
)

// TestNewTracerProviderEndpoints: the flag, then the traces variable, then
// the generic one name the receiver; none exports nothing; a bad flag is
// an error that shows no credentials.
func TestNewTracerProviderEndpoints(t *testing.T) {
	for _, tc := range []struct {
		flag, traces, generic string
		where, err            string
	}{
		{"", "", "", "", ""},
		{"", "", "http://collector:4318", "$" + oteltrace.EndpointEnv, ""},
		{"", "http://collector:4318/v1/traces", "http://other:4318", "$" + oteltrace.TracesEndpointEnv, ""},
		{"http://user:secret@collector:4318", "http://x:4318/v1/traces", "", "http://user:xxxxx@collector:4318/v1/traces", ""},
		{"collector:4318", "", "", "", "is not an http:// or https:// URL"},
		{"ftp://user:secret@collector", "", "", "", "is not an http:// or https:// URL"},
	} {
		t.Setenv(oteltrace.TracesEndpointEnv, tc.traces)
		t.Setenv(oteltrace.EndpointEnv, tc.generic)
		tp, where, err := oteltrace.NewTracerProvider(context.Background(), tc.flag)
		if tp != nil {
			_ = tp.Shutdown(context.Background())
		}
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("NewTracerProvider(%q) err = %v; want %q without the password", tc.flag, err, tc.err)
			}
		case err != nil:
			t.Errorf("NewTracerProvider(%q) err = %v", tc.flag, err)
		case where != tc.where || (tp == nil) != (tc.where == ""):
			t.Errorf("NewTracerProvider(%q) (env %q, %q) = %v, %q; want where %q", tc.flag, tc.traces, tc.generic, tp != nil, where, tc.where)
		}
	}
}
