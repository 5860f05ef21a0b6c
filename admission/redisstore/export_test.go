package redisstore

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// IsSettleCall reports whether the arguments of a client command call a
// settle script, lean or generic, for tests that replay or hold settle
// calls as a client retrying after a lost reply would.
func IsSettleCall(args []any) bool {
	if len(args) < 3 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha":
		return leanSettles.has(arg) || genericSettles.has(arg)
	case "eval":
		sum := sha1.Sum([]byte(arg))
		sha := hex.EncodeToString(sum[:])
		return leanSettles.has(sha) || genericSettles.has(sha)
	}
	return false
}

// has reports whether sha names a script of c.
func (c *scriptCache[K]) has(sha string) bool {
	for i := range c.scripts {
		if s := c.scripts[i].Load(); s != nil && s.sha == sha {
			return true
		}
	}
	return false
}
