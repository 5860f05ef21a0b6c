// Package tenantname makes a tenant name, which a caller may choose, safe
// to show: as a metric label value (package metrics) and as a key of the
// shadow reports (package shadow). One hostile name can then neither
// break an exposition or a terminal, nor fill memory, nor pass for another
// tenant or a reserved bucket such as the overflow.
package tenantname

import (
	"unicode"
	"unicode/utf8"
)

// Max bounds the length in bytes of the names Safe returns.
const Max = 128

// Safe returns t itself when it is at most Max bytes of valid UTF-8
// without a control character and none of reserved, without allocating;
// otherwise Hashed(t).
func Safe(t string, reserved ...string) string {
	if len(t) > Max {
		return Hashed(t)
	}
	for _, r := range reserved {
		if t == r {
			return Hashed(t)
		}
	}
	for _, r := range t {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return Hashed(t)
		}
	}
	return t
}

// Hashed returns a printable prefix of t (each invalid byte or control
// character as '?'), "~" and 16 hex digits of a hash of the whole of t
// (FNV-1a, 64 bits, the same in every process): at most Max bytes of
// valid UTF-8.
func Hashed(t string) string {
	const suffix = 1 + 16 // "~" and the hash
	b := make([]byte, 0, Max)
	for _, r := range t {
		if r == utf8.RuneError || unicode.IsControl(r) {
			r = '?'
		}
		if len(b)+utf8.RuneLen(r) > Max-suffix {
			break
		}
		b = utf8.AppendRune(b, r)
	}
	h := uint64(14695981039346656037) // FNV-1a, 64 bits
	for i := 0; i < len(t); i++ {
		h = (h ^ uint64(t[i])) * 1099511628211
	}
	b = append(b, '~')
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[h>>shift&0xf])
	}
	return string(b)
}
