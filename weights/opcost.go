package weights

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// OperationCost is one entry of an [OperationCosts] table.
type OperationCost struct {
	// Method is the HTTP method ("GET", "POST", ...), case-insensitive.
	// Empty or "*" matches every method not listed for the same route.
	Method string `json:"method,omitempty" yaml:"method,omitempty"`
	// Route is the route template as the router reports it ("/v1/exports",
	// "/v1/items/{id}", "/v1/items/:id"), matched exactly, or a prefix ending
	// in "/*" ("/v1/admin/*") that matches every route below it. The longest
	// matching prefix wins; an exact route beats any prefix.
	Route string `json:"route" yaml:"route"`
	// Units is what one call costs, in the unit the policy counts ("an
	// export is 50, a lookup is 1"). It must be >= 0 and at most
	// [MaxTokens], the largest amount an admission controller accepts.
	Units int64 `json:"units" yaml:"units"`
}

// OperationCosts prices the calls of non-LLM APIs by route and method. It is
// immutable, safe for concurrent use, and Cost does not allocate.
type OperationCosts struct {
	def      int64
	exact    map[string]methodCosts
	prefixes []prefixCost // longest first
}

type methodCosts struct {
	byMethod map[string]int64
	any      int64
	hasAny   bool
}

func (m methodCosts) cost(method string) (int64, bool) {
	if u, ok := m.byMethod[method]; ok {
		return u, true
	}
	if u, ok := m.byMethod[strings.ToUpper(method)]; ok {
		return u, true
	}
	return m.any, m.hasAny
}

type prefixCost struct {
	prefix string // with the trailing slash, without the star
	costs  methodCosts
}

// NewOperationCosts validates a table and returns it. def is the cost of a
// call that matches no entry. Costs are from 0 to [MaxTokens]. Every problem is reported at once, each with
// its entry's index ("costs[2].units: must be >= 0").
func NewOperationCosts(def int64, entries []OperationCost) (*OperationCosts, error) {
	var errs []error
	if def < 0 {
		errs = append(errs, errors.New("default: must be >= 0"))
	} else if def > MaxTokens {
		errs = append(errs, fmt.Errorf("default: must be <= %d", MaxTokens))
	}
	t := &OperationCosts{def: def, exact: map[string]methodCosts{}}
	prefixes := map[string]methodCosts{}
	var order []string
	seen := map[[2]string]int{}
	for i, e := range entries {
		path := fmt.Sprintf("costs[%d]", i)
		method := strings.ToUpper(e.Method)
		if method == "" {
			method = "*"
		}
		switch {
		case e.Route == "" || e.Route[0] != '/':
			errs = append(errs, fmt.Errorf("%s.route: must start with /", path))
		case strings.Contains(e.Route, "*") && !strings.HasSuffix(e.Route, "/*"):
			errs = append(errs, fmt.Errorf("%s.route: a wildcard is only allowed as a final /*", path))
		case strings.Count(e.Route, "*") > 1:
			errs = append(errs, fmt.Errorf("%s.route: at most one wildcard", path))
		}
		if method != "*" && !validMethod(method) {
			errs = append(errs, fmt.Errorf("%s.method: %q is not an HTTP method", path, e.Method))
		}
		if e.Units < 0 {
			errs = append(errs, fmt.Errorf("%s.units: must be >= 0", path))
		} else if e.Units > MaxTokens {
			errs = append(errs, fmt.Errorf("%s.units: must be <= %d", path, MaxTokens))
		}
		key := [2]string{method, e.Route}
		if j, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("%s: %s %s duplicates costs[%d]", path, method, e.Route, j))
		}
		seen[key] = i

		target := t.exact
		route := e.Route
		if p, ok := strings.CutSuffix(route, "*"); ok {
			route, target = p, prefixes
			if _, known := prefixes[route]; !known {
				order = append(order, route)
			}
		}
		mc := target[route]
		if method == "*" {
			mc.any, mc.hasAny = e.Units, true
		} else {
			if mc.byMethod == nil {
				mc.byMethod = map[string]int64{}
			}
			mc.byMethod[method] = e.Units
		}
		target[route] = mc
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("weights: invalid operation costs: %w", err)
	}
	for _, p := range order {
		t.prefixes = append(t.prefixes, prefixCost{prefix: p, costs: prefixes[p]})
	}
	for i := 1; i < len(t.prefixes); i++ { // insertion sort, longest first
		for j := i; j > 0 && len(t.prefixes[j].prefix) > len(t.prefixes[j-1].prefix); j-- {
			t.prefixes[j], t.prefixes[j-1] = t.prefixes[j-1], t.prefixes[j]
		}
	}
	return t, nil
}

func validMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// Cost returns the units of a call to route (the router's template) with
// method: the exact route's entry for that method, else its any-method
// entry, else the longest matching prefix entry likewise, else the table's
// default.
func (t *OperationCosts) Cost(method, route string) int64 {
	if t == nil {
		return 0
	}
	if mc, ok := t.exact[route]; ok {
		if u, ok := mc.cost(method); ok {
			return u
		}
	}
	for _, p := range t.prefixes {
		if strings.HasPrefix(route, p.prefix) || (len(route)+1 == len(p.prefix) && strings.HasPrefix(p.prefix, route)) {
			if u, ok := p.costs.cost(method); ok {
				return u
			}
		}
	}
	return t.def
}
