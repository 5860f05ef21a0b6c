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
// session, and per loop policy.
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

// Loop is one agent session refused by a loop policy (admission's
// ReasonLoop; in shadow mode, the refusals it would make) on the status
// page, with the evidence of its last refusal: which step it repeated,
// never the step's arguments.
type Loop struct {
	Tenant string `json:"tenant"`
	// Session is as in Session: the id, or its pseudonym.
	Session string `json:"session"`
	// Refusals counts the session's loop refusals since it was last idle
	// for the page's window.
	Refusals int64 `json:"refusals"`
	// Step is the operation of the step last refused: its route ("POST
	// /v1/chat/completions"), or the tool call ("mcp tools/call search",
	// the tool a name the policy file declares or __other__), at most
	// 200 bytes.
	Step string `json:"step"`
	// Limit and Window are the policy's figures the session went past:
	// more than Limit near-identical steps within Window.
	Limit  int64         `json:"limit"`
	Window time.Duration `json:"window_ns"`
	// Updated is when the last refusal happened.
	Updated time.Time `json:"updated"`
}

func (s Session) who() (string, string)    { return s.Tenant, s.Session }
func (s Session) rank() (int64, time.Time) { return s.Used, s.Updated }
func (s Session) owned() Session {
	s.Tenant, s.Session = strings.Clone(s.Tenant), strings.Clone(s.Session)
	return s
}
func (l Loop) who() (string, string)    { return l.Tenant, l.Session }
func (l Loop) rank() (int64, time.Time) { return l.Refusals, l.Updated }
func (l Loop) owned() Loop {
	l.Tenant, l.Session, l.Step = strings.Clone(l.Tenant), strings.Clone(l.Session), strings.Clone(l.Step)
	return l
}

// A row is an entry of a followed table: a session of a tenant, ranked
// by a score (the spend, the refusals) and when it was last updated.
type row[T any] interface {
	who() (tenant, session string)
	rank() (score int64, updated time.Time)
	owned() T // a copy holding no string of the event it came from
}

// followed is a table of the sessions of one policy with the highest
// score: at most maxSessions, a new session in a full table taking the
// place of one idle for longer than the page's window, else of the one
// with the lowest score when its own is higher.
type followed[T row[T]] struct{ s []T }

// note records e: update changes the entry of the same session, else e
// takes a place (see followed), the entries last updated before stale
// giving way first.
func (t *followed[T]) note(e T, stale time.Time, update func(*T)) {
	tenant, session := e.who()
	least := -1
	for i := range t.s {
		if tn, ss := t.s[i].who(); tn == tenant && ss == session {
			update(&t.s[i])
			return
		}
		if least < 0 || weaker(t.s[i], t.s[least], stale) {
			least = i
		}
	}
	switch {
	case len(t.s) < maxSessions:
		t.s = append(t.s, e.owned())
	case weaker(t.s[least], e, stale):
		t.s[least] = e.owned()
	}
}

// weaker reports whether a gives way before b: an idle session before an
// active one, then the one with the lower score.
func weaker[T row[T]](a, b T, stale time.Time) bool {
	as, au := a.rank()
	bs, bu := b.rank()
	if ai, bi := au.Before(stale), bu.Before(stale); ai != bi {
		return ai
	}
	return as < bs
}

// top returns the entries updated since stale, the highest score first,
// at most n. Callers hold p.mu.
func (t *followed[T]) top(n int, stale time.Time) []T {
	var out []T
	for _, e := range t.s {
		if _, u := e.rank(); !u.Before(stale) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b T) int {
		as, _ := a.rank()
		bs, _ := b.rank()
		at, aa := a.who()
		bt, bb := b.who()
		return cmp.Or(cmp.Compare(bs, as), cmp.Compare(at, bt), cmp.Compare(aa, bb))
	})
	return out[:min(n, len(out))]
}

// table returns the table of policy in tables, creating it unless the
// page follows maxStatusPolicies already (nil then). Callers hold p.mu.
func table[T row[T]](tables map[string]*followed[T], policy string) *followed[T] {
	t := tables[policy]
	if t == nil && len(tables) < maxStatusPolicies {
		t = &followed[T]{}
		tables[strings.Clone(policy)] = t
	}
	return t
}

// sessionName returns how the page shows session.
func (p *Page) sessionName(session string) string {
	if p.cfg.HashSessions {
		return apikey.HashSession(session)
	}
	return session
}

// Settled follows the spend of the sessions of the policies keyed by
// session (Settlement.Session is set only for them).
func (p *Page) Settled(s admission.Settlement) {
	if s.Session == "" || s.Limit <= 0 {
		return
	}
	now := p.clock.Now()
	ses := Session{Tenant: s.Tenant, Session: p.sessionName(s.Session), Used: min(max(s.Limit-s.Remaining, 0), s.Limit), Limit: s.Limit, Updated: now}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := table(p.sessions, s.Policy); t != nil {
		t.note(ses, now.Add(-p.cfg.Window), func(e *Session) { e.Used, e.Limit, e.Updated = ses.Used, ses.Limit, ses.Updated })
	}
}

// loop follows the loop refusals of sessions: d is a loop policy's
// rejection or would-reject of a request of a session.
func (p *Page) loop(d *admission.Decision) {
	now := p.clock.Now()
	stale := now.Add(-p.cfg.Window)
	l := Loop{Tenant: d.Tenant, Session: p.sessionName(d.Session), Refusals: 1, Step: clip(d.Operation), Limit: d.Limit, Window: d.Window, Updated: now}
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := table(p.loops, d.Policy); t != nil {
		t.note(l, stale, func(e *Loop) {
			if e.Updated.Before(stale) {
				e.Refusals = 0
			}
			e.Refusals++
			if e.Step != l.Step {
				e.Step = strings.Clone(l.Step)
			}
			e.Limit, e.Window, e.Updated = l.Limit, l.Window, l.Updated
		})
	}
}
