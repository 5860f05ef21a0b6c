package metrics

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Exposure says where a program serves its metrics: a policy file's
// metrics section (config.Metrics: Enabled, Path, Listen), or flags.
type Exposure struct {
	// Enabled serves the metrics at all.
	Enabled bool
	// Path is the scrape path ("/metrics"), compared as written, not as
	// a ServeMux pattern.
	Path string
	// Listen is the address of a separate metrics listener. Empty serves
	// the metrics on the application's listener, ahead of the
	// application.
	Listen string
}

// Expose serves h, the metrics handler (Prometheus.Handler), as e says,
// and returns the handler to serve app with:
//
//   - Enabled false: app itself, and no listener (h may be nil);
//   - Listen empty: a handler that answers GET and HEAD of exactly Path
//     with h and passes every other request to app. The scrape is
//     answered ahead of app, so the admission middleware inside app
//     never limits it, whatever http.exempt lists;
//   - Listen set: app itself, and a Listener serving h at Path on that
//     address, to close at shutdown.
//
// Keep a separate listener private: the metrics name the heaviest tenants.
func Expose(e Exposure, h, app http.Handler) (http.Handler, *Listener, error) {
	if app == nil {
		return nil, nil, errors.New("metrics: Expose needs an application handler")
	}
	if !e.Enabled {
		return app, nil, nil
	}
	if h == nil {
		return nil, nil, errors.New("metrics: metrics are enabled and Expose has no metrics handler")
	}
	if e.Listen == "" {
		return scrape(e.Path, h, app), nil, nil
	}
	l, err := Serve(e.Listen, e.Path, h, http.NotFoundHandler())
	return app, l, err
}

// Serve serves h at path and rest at every other path on a listener of
// its own at addr, for a program whose operator listener has its own
// address or serves more than the metrics (llmproxy's rollout report);
// Expose calls it for Exposure.Listen. Close the listener at shutdown.
func Serve(addr, path string, h, rest http.Handler) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ml := &Listener{
		addr: ln.Addr().String(),
		srv: &http.Server{
			Handler:           bodiless(scrape(path, h, rest)),
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    16 << 10,
		},
	}
	ml.wg.Add(1)
	go func() {
		defer ml.wg.Done()
		if err := ml.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			ml.err = err
		}
	}()
	return ml, nil
}

// bodiless refuses, for the operator listener whose endpoints read no
// body, a request that sends one (a Content-Length or a
// Transfer-Encoding) with 400 and the connection closed, so that no bytes
// after a body whose framing a proxy could read differently (RFC 9112
// §6.1) are served as another request; after an HTTP/1.0 request, whose
// Transfer-Encoding net/http removes unseen, the connection is closed too.
func bodiless(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
			w.Header().Set("Connection", "close")
		}
		if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
			http.Error(w, "the operator endpoints take no request body", http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// scrape answers GET and HEAD of exactly path with h (405 for other
// methods), and passes every other path to next. The path is compared as
// written in the file, not as a ServeMux pattern.
func scrape(path string, h, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// A Listener serves the metrics on an address of its own
// (Exposure.Listen, Serve).
type Listener struct {
	addr string
	srv  *http.Server
	wg   sync.WaitGroup
	err  error // set by the serving goroutine before wg.Done
}

// Addr returns the address listened on, with the port chosen when
// the address names port 0.
func (l *Listener) Addr() string { return l.addr }

// Close stops the listener and its connections, and returns the error
// that stopped it serving earlier, if any.
func (l *Listener) Close() error {
	err := l.srv.Close()
	l.wg.Wait()
	return errors.Join(err, l.err)
}
