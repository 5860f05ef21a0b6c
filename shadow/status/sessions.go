package status

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/admission"
	"github.com/sluicehq/sluice/admission/apikey"
)

// maxSessions bounds the sessions the page follows per policy keyed by
// session.
const maxSessions = 64

// Session is one agent session of a policy keyed by session on the status
// page: what its partition of the policy holds (a session budget's spend
// in the policy's unit), as of its last settlement.
type Session struct {
	Tenant string `json:"tenant"`
	// Session is the session id as the request named it, or its
	// pseudonym (apikey.HashSession) with Config.HashSessions.
	Session string `json:"session"`
	// Used is Limit less what the session's partition had left after the
	// session's last settlement: for a quota, what the session spent of
	// its budget in the period.
	Used  int64 `json:"used"`
	Limit int64 `json:"limit"`
	// Updated is when the session last settled.
	Updated time.Time `json:"updated"`
}

// sessionTop follows the sessions of one policy with the most used:
// at most maxSessions, a session settling in a full table taking the
// place of the one with the least used, or of one idle for longer than
// the page's window.
type sessionTop struct{ s []Session }

// Settled follows the spend of the sessions of the policies keyed by
// session (Settlement.Session is set only for them).
func (p *Page) Settled(s admission.Settlement) {
	if s.Session == "" || s.Limit <= 0 {
		return
	}
	now := p.clock.Now()
	used := min(max(s.Limit-s.Remaining, 0), s.Limit)
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.sessions[s.Policy]
	if t == nil {
		if len(p.sessions) >= maxStatusPolicies {
			return
		}
		t = &sessionTop{}
		p.sessions[strings.Clone(s.Policy)] = t
	}
	session := s.Session
	if p.cfg.HashSessions {
		session = apikey.HashSession(session)
	}
	t.note(Session{Tenant: s.Tenant, Session: session, Used: used, Limit: s.Limit, Updated: now}, now.Add(-p.cfg.Window))
}

// note records ses, the sessions last updated before stale first to
// give way.
func (t *sessionTop) note(ses Session, stale time.Time) {
	least := -1
	for i := range t.s {
		e := &t.s[i]
		if e.Tenant == ses.Tenant && e.Session == ses.Session {
			e.Used, e.Limit, e.Updated = ses.Used, ses.Limit, ses.Updated
			return
		}
		if least < 0 || weaker(e, &t.s[least], stale) {
			least = i
		}
	}
	ses.Tenant, ses.Session = strings.Clone(ses.Tenant), strings.Clone(ses.Session)
	switch {
	case len(t.s) < maxSessions:
		t.s = append(t.s, ses)
	case t.s[least].Updated.Before(stale) || t.s[least].Used < ses.Used:
		t.s[least] = ses
	}
}

// weaker reports whether a gives way before b: an idle session before an
// active one, then the one with less used.
func weaker(a, b *Session, stale time.Time) bool {
	if ai, bi := a.Updated.Before(stale), b.Updated.Before(stale); ai != bi {
		return ai
	}
	return a.Used < b.Used
}

// top returns the sessions active since stale, the most used first, at
// most n. Callers hold p.mu.
func (t *sessionTop) top(n int, stale time.Time) []Session {
	var out []Session
	for _, s := range t.s {
		if !s.Updated.Before(stale) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Session) int {
		return cmp.Or(cmp.Compare(b.Used, a.Used), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Session, b.Session))
	})
	return out[:min(n, len(out))]
}
