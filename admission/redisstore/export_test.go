package redisstore

// IsSettleScript reports whether sha names a settle script or function,
// for tests that replay settle calls as a client retrying after a lost
// reply would.
func IsSettleScript(sha string) bool {
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
