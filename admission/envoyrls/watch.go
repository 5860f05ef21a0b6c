package envoyrls

import (
	"github.com/sluicehq/sluice/admission/envoyrls/rlsconfig"
	"github.com/sluicehq/sluice/admission/reload"
)

// Watch loads path (a file or a directory, as rlsconfig.Load) into srv
// now, and again whenever a new version of it is written or the process
// gets SIGHUP, until Close: the watcher of policy files (reload.Watcher,
// with its options), for the rate limit configuration. A configuration
// that does not load is refused, logged and reported once per version;
// the one in force keeps serving. Domains whose file sets no store keep
// their limits in the server's default store (WithDefaultStore).
func Watch(path string, srv *Server, opts ...reload.Option) (*reload.Watcher, error) {
	var lopts []rlsconfig.Option
	if srv.defaultStore != "" {
		lopts = append(lopts, rlsconfig.DefaultStore(srv.defaultStore))
	}
	load := func(path string) (int, error) {
		cfg, err := rlsconfig.Load(path, lopts...)
		if err != nil {
			return 0, err
		}
		return len(cfg.Policies), srv.SetConfig(cfg)
	}
	return reload.NewWatcher(path, load, append([]reload.Option{reload.WithName("rate limit configuration")}, opts...)...)
}
