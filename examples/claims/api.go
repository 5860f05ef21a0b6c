package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/httpadmit"
)

// Bounds of what a tenant may store.
const (
	// MaxClaims is the most claims a tenant may hold (507 past it).
	MaxClaims = 10_000
	// MaxText bounds the policy number and the description, in bytes.
	MaxText = 1024
	// ListLimit is the most claims GET /claims returns: the newest.
	ListLimit = 100
)

// A Claim is one insurance claim filed by a tenant.
type Claim struct {
	ID           string    `json:"id"`
	PolicyNumber string    `json:"policy_number"`
	AmountCents  int64     `json:"amount_cents"`
	Description  string    `json:"description,omitempty"`
	Filed        time.Time `json:"filed"`
}

// store holds each tenant's claims in memory.
type store struct {
	clock admission.Clock
	mu    sync.Mutex
	by    map[string][]Claim // tenant → claims, oldest first
	next  int64
}

func newStore(clock admission.Clock) *store {
	return &store{clock: clock, by: map[string][]Claim{}}
}

var errFull = errors.New("claim store full")

func (s *store) add(tenant string, c Claim) (Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.by[tenant]) >= MaxClaims {
		return Claim{}, errFull
	}
	s.next++
	c.ID = "clm_" + strconv.FormatInt(s.next, 10)
	c.Filed = s.clock.Now().UTC()
	s.by[tenant] = append(s.by[tenant], c)
	return c, nil
}

func (s *store) get(tenant, id string) (Claim, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.by[tenant] {
		if c.ID == id {
			return c, true
		}
	}
	return Claim{}, false
}

// list returns a copy of the newest n claims of tenant (all when n is 0).
func (s *store) list(tenant string, n int) []Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.by[tenant]
	if n > 0 && len(cs) > n {
		cs = cs[len(cs)-n:]
	}
	return append([]Claim{}, cs...)
}

// api serves the claims routes. The middleware in front of it has already
// authenticated the caller and admitted the request.
type api struct {
	claims     *store
	identity   func() *httpadmit.IdentityConfig
	exportHold func(ctx context.Context)
}

func (a *api) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /claims", a.create)
	mux.HandleFunc("GET /claims", a.list)
	mux.HandleFunc("GET /claims/{id}", a.get)
	mux.HandleFunc("GET /claims/export", a.export)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// tenant returns the caller's tenant, from the same validated credentials
// the middleware admitted the request on.
func (a *api) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, err := a.identity().Identify(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "unauthenticated")
		return "", false
	}
	return id.Tenant, true
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	var c Claim
	dec := json.NewDecoder(r.Body) // bounded by the middleware (http.max_body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not a claim: want {\"policy_number\": \"P-1\", \"amount_cents\": 12000, \"description\": \"...\"}")
		return
	}
	switch {
	case c.PolicyNumber == "" || len(c.PolicyNumber) > MaxText:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("policy_number: between 1 and %d bytes", MaxText))
		return
	case c.AmountCents <= 0 || c.AmountCents > 1_000_000_000_00:
		writeError(w, http.StatusBadRequest, "amount_cents: between 1 and 100000000000")
		return
	case len(c.Description) > MaxText:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("description: at most %d bytes", MaxText))
		return
	}
	c, err := a.claims.add(tenant, c)
	if err != nil {
		writeError(w, http.StatusInsufficientStorage, fmt.Sprintf("at most %d claims per tenant", MaxClaims))
		return
	}
	w.Header().Set("Location", "/claims/"+c.ID)
	writeJSON(w, http.StatusCreated, c)
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	if tenant, ok := a.tenant(w, r); ok {
		writeJSON(w, http.StatusOK, map[string][]Claim{"claims": a.claims.list(tenant, ListLimit)})
	}
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	c, found := a.claims.get(tenant, r.PathValue("id"))
	if !found {
		writeError(w, http.StatusNotFound, "no such claim")
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// export writes every claim of the tenant as CSV: the heavy route, two at
// a time per tenant.
func (a *api) export(w http.ResponseWriter, r *http.Request) {
	tenant, ok := a.tenant(w, r)
	if !ok {
		return
	}
	if a.exportHold != nil {
		a.exportHold(r.Context())
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"id", "policy_number", "amount_cents", "description", "filed"})
	for _, c := range a.claims.list(tenant, 0) {
		_ = cw.Write([]string{c.ID, c.PolicyNumber, strconv.FormatInt(c.AmountCents, 10), c.Description, c.Filed.Format(time.RFC3339)})
	}
	cw.Flush()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
