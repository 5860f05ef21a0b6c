package gateway

import (
	"net/http"

	"github.com/sluicehq/sluice/admission"
)

// classify sets the priority class of an identified request from the
// policy file of st: its classes section names where a class comes from
// (the key's entry, the route, the tenant's plan, a header only for the
// keys it lists; see config.Classes), and the policies' queue.shares
// reserve each class its part of a shared limit.
func (st *state) classify(r *http.Request, req *admission.Request) {
	req.Priority = st.file.Priority(req.Tenant, req.KeyID, req.Operation, r.Header.Values)
}
