package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// The identity rules of agent sessions, which every transport shares: a
// session id is read from a request (a header, a body field, call
// metadata) and counted under the caller's tenant by the policies keyed
// by session.
const (
	// DefaultMaxSessionLength is the longest session id accepted when
	// no bound is configured, in bytes.
	DefaultMaxSessionLength = 128
	// MaxSessionLength is the largest bound a configuration may set.
	MaxSessionLength = 1024
)

// ErrInvalidSession: a request names a session whose id ValidSession
// refuses. A transport answers it as a bad request (HTTP 400), not as
// unauthenticated: the caller was identified.
var ErrInvalidSession = errors.New("invalid session id")

// DefaultSessionHeaders are the headers read for a session id by
// default, in order: X-Session-Id, then the MCP streamable HTTP
// transport's Mcp-Session-Id.
var DefaultSessionHeaders = []string{"X-Session-Id", "Mcp-Session-Id"}

// ValidSession reports whether id may be a session id: 1 to max bytes
// (DefaultMaxSessionLength when max is zero or less), each printable
// ASCII other than space (0x21 to 0x7E, the characters of an MCP session
// id). Such an id holds no separator of partition keys, no control
// character for a log, nothing a header would need to escape. An id it
// refuses is refused, never shortened.
func ValidSession(id string, max int) bool {
	if max <= 0 {
		max = DefaultMaxSessionLength
	}
	if id == "" || len(id) > max {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// HashSession returns the pseudonym logs write for the session id when
// the operator asks for hashed sessions (logging.sessions: hash): "h-"
// and the first 16 bytes of the id's SHA-256 in hex, 34 characters that
// are themselves a valid session id. It is the same in every process, so
// the decision logs of several replicas and a request log replayed later
// still tell one session from another; it hides an id, not a guessable
// one (whoever can list candidate ids can hash them), so sessions whose
// ids should stay private need random ids, as MCP's are.
func HashSession(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "h-" + hex.EncodeToString(sum[:16])
}
