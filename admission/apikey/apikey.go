// Package apikey is how API keys are stored and what they stand for: the
// SHA-256 Hash of a key (the only form a key is ever kept in, written
// "sha256:<64 hex digits>"), its short loggable ID, and the Identity a
// key resolves to; and the identity rules every transport applies
// (Rules: a key from a header or metadata, looked up by its hash in a
// Table or any Lookup, else the anonymous tenant), which the net/http middleware and the gRPC
// interceptors (admission/grpcadmit) share by adapting their headers to
// a getter. It imports only the standard library, so that the
// net/http middleware (admission/httpadmit) resolves keys without
// linking the policy-file decoder (admission/config), which fills its
// key table from a file's api_keys with the same types.
package apikey

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// An Identity is the caller an API key stands for (and
// httpadmit.Identity the same type): the tenant whose api_keys list it,
// the key's id (the entry's, else Hash.ID; never the key) and the end
// user, if the entry names one.
type Identity struct {
	Tenant string // the account billed; the usual partition key
	KeyID  string // the credential's short id
	User   string // the end user inside the tenant, when known
}

// Hash is the SHA-256 digest of an API key: the only form in which keys
// are stored.
type Hash [sha256.Size]byte

// Sum returns the digest of an API key.
func Sum(key string) Hash {
	var buf [128]byte
	if len(key) <= len(buf) {
		return sha256.Sum256(append(buf[:0], key...))
	}
	return sha256.Sum256([]byte(key))
}

// String returns the stored form, "sha256:" and 64 lower-case hex digits.
func (h Hash) String() string { return "sha256:" + hex.EncodeToString(h[:]) }

// ID returns a short id derived from the hash, safe to log and to use as a
// partition key: "key_" and the first 12 hex digits.
func (h Hash) ID() string { return "key_" + hex.EncodeToString(h[:6]) }

// ParseHash parses the stored form written by Hash.String.
func ParseHash(s string) (Hash, error) {
	var h Hash
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok {
		return h, errors.New(`must start with "sha256:" (store the hash of the key, not the key: see admitctl hash-key)`)
	}
	if len(hexPart) != 2*sha256.Size {
		return h, errors.New("must have 64 hex digits after \"sha256:\"")
	}
	if _, err := hex.Decode(h[:], []byte(hexPart)); err != nil {
		return h, errors.New("is not hexadecimal")
	}
	return h, nil
}
