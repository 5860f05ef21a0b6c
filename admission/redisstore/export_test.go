package redisstore

// SettleScripts names the settle scripts and functions, for tests that
// replay settle calls as a client retrying after a lost reply would.
func SettleScripts() []string {
	return []string{leanSettleScript.Hash(), settleScript.Hash(), libSettle}
}
