package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/admission/config"
)

// The upload settings of the http section decode with their units, and
// a rate that is not a size or a per-tenant cap above the total is
// refused with its path.
func TestHTTPUploadSettings(t *testing.T) {
	const pol = "version: 1\npolicies: [{name: rpm, key: [tenant], algorithm: token_bucket, limit: 10, per: 1m}]\n"
	f, err := config.Parse("p.yaml", []byte(pol+"http: {upload_min_rate: 256KiB, upload_grace: 5s, max_uploads: 8, max_uploads_per_tenant: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h := f.HTTP; h.UploadMinRate != 256<<10 || h.UploadGrace != 5*time.Second || h.MaxUploads != 8 || h.MaxUploadsPerTenant != 2 {
		t.Errorf("http = %+v; want rate 262144, grace 5s, 8 uploads, 2 a tenant", h)
	}
	for src, want := range map[string]string{
		"http: {upload_min_rate: fast}":                     "http.upload_min_rate",
		"http: {upload_min_rate: 0}":                        "http.upload_min_rate",
		"http: {upload_grace: 0s}":                          "http.upload_grace",
		"http: {max_uploads: 2, max_uploads_per_tenant: 3}": "http.max_uploads_per_tenant",
		"http: {max_uploads: 0}":                            "http.max_uploads",
	} {
		if _, err := config.Parse("p.yaml", []byte(pol+src+"\n")); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want one naming %s", src, err, want)
		}
	}
}
