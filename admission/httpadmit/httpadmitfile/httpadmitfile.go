// Package httpadmitfile connects a policy file (admission/config) to the
// net/http middleware (admission/httpadmit). The middleware itself takes
// plain values (an admission.Config and Options), so a program that
// configures it in Go links neither the YAML decoder nor the file
// watcher; a program that reads a policy file uses this package:
//
//	f, _ := config.Load("policies.yaml")
//	ctl, _ := admission.New(f.Config)
//	mw, _ := httpadmit.New(ctl, httpadmitfile.Options(f)...)
//	w, _ := reload.Watch("policies.yaml", httpadmitfile.Middleware{Middleware: mw})
//
// Middleware is the middleware as a reload.Subscriber and a
// directory.Target: its Apply installs the whole file (policies, plans,
// the http and identity sections) as one snapshot, by one swap.
package httpadmitfile

import (
	"github.com/sluicehq/sluice/admission/config"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// Options returns the options a policy file sets: its http section and
// its identity section with the tenants' key table. Pass them to
// httpadmit.New; Middleware.Apply installs those of a reloaded file.
func Options(f *config.File) []httpadmit.Option {
	h, id := &f.HTTP, &f.Identity
	return []httpadmit.Option{
		httpadmit.WithExempt(h.Exempt...), httpadmit.WithMaxBody(h.MaxBody), httpadmit.WithBodyTimeout(h.BodyTimeout),
		httpadmit.WithQuotaStatus(h.QuotaStatus), httpadmit.WithShadowHeader(h.ShadowHeader),
		httpadmit.WithIdentityConfig(httpadmit.IdentityConfig{
			KeyHeaders: id.KeyHeaders, Keys: id.Keys, TrustedProxies: id.TrustedProxies,
			ClientIPHeader: id.ClientIPHeader, AnonymousTenant: id.AnonymousTenant, RequireKey: id.RequireKey,
		}),
	}
}

// Middleware is a httpadmit.Middleware that takes policy files: a
// reload.Subscriber and a directory.Target. Its other methods are the
// middleware's.
type Middleware struct {
	*httpadmit.Middleware
}

// Apply installs a policy file, as a reload.Subscriber: Compile, then
// Install, as one step. A file that does not compile changes nothing.
func (m Middleware) Apply(f *config.File) error {
	return m.Middleware.Apply(f.Config, Options(f)...)
}

// Compile builds, without installing it, the snapshot of a policy file:
// its policies and plans compiled by the controller, its http and
// identity sections (Options) over the middleware's own options.
func (m Middleware) Compile(f *config.File) (*httpadmit.Snapshot, error) {
	return m.Middleware.Compile(f.Config, Options(f)...)
}
