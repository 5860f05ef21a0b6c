package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// IsSettleCall reports whether the arguments of a client command call a
// settle script or function, lean or generic, for tests that replay or hold
// settle calls as a client retrying after a lost reply would.
func IsSettleCall(args []any) bool {
	if len(args) < 3 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha", "fcall":
		return isSettleScript(arg)
	case "eval":
		sum := sha1.Sum([]byte(arg))
		return isSettleScript(hex.EncodeToString(sum[:]))
	}
	return false
}

// isSettleScript reports whether sha names a settle script or function.
func isSettleScript(sha string) bool {
	if sha == settleScript.Hash() || sha == libSettle {
		return true
	}
	for i := range leanSettles.scripts {
		if s := leanSettles.scripts[i].Load(); s != nil && s.Hash() == sha {
			return true
		}
	}
	return false
}
