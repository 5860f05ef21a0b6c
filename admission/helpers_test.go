package admission_test

import "net/netip"

func netipMustParse(s string) netip.Addr { return netip.MustParseAddr(s) }
