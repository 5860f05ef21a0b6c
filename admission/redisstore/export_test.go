package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// IsSettleCall reports whether the arguments of a client command call a
// settle script, for tests that replay or hold settle calls as a client
// retrying after a lost reply would.
func IsSettleCall(args []any) bool { return callsScriptOf(args, settleScripts) }

// isAcquireCall reports whether the arguments of a client command call an
// acquire script.
func isAcquireCall(args []any) bool { return callsScriptOf(args, acquireScripts) }

// callsScriptOf reports whether the arguments of a client command call a
// script of one of caches, by hash (EVALSHA) or by source (EVAL).
func callsScriptOf(args []any, caches ...interface{ has(sha string) bool }) bool {
	if len(args) < 3 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha":
	case "eval":
		sum := sha1.Sum([]byte(arg))
		arg = hex.EncodeToString(sum[:])
	default:
		return false
	}
	for _, c := range caches {
		if c.has(arg) {
			return true
		}
	}
	return false
}

// has reports whether sha names a script of c.
func (c *scriptCache) has(sha string) bool {
	if m := c.scripts.Load(); m != nil {
		for _, s := range *m {
			if s.sha == sha {
				return true
			}
		}
	}
	return false
}

// NodeQueues returns how many Redis nodes st has a group queue for.
func NodeQueues(st *Store) int {
	n := 0
	st.nodes.Range(func(any, any) bool { n++; return true })
	return n
}

// CloseBreaker closes st's circuit breaker, as a successful probe would:
// for tests that end a fault and want the next call to reach Redis
// whatever the wall clock says.
func CloseBreaker(st *Store) { st.brk.success() }
