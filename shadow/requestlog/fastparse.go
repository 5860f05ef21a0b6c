package requestlog

import (
	"bytes"
	"unicode/utf8"
)

// parseFast decodes the common shape of a record without reflection: a
// flat object of known keys whose strings have no escapes and whose
// numbers are plain integers. It reports false for anything else, and the
// caller then decodes the line with encoding/json, which accepts the same
// records and explains what is wrong with the others. Strings are made by
// str, which may intern them.
func parseFast(line []byte, w *recordJSON, str func([]byte) string) bool {
	p := fastParser{b: line, str: str}
	p.ws()
	if !p.lit('{') {
		return false
	}
	var seen uint16
	for first := true; ; first = false {
		key, end, ok := p.member(first)
		if !ok {
			return false
		}
		if end {
			break
		}
		bit := uint16(1) << keyBit(key)
		if seen&bit != 0 {
			return false // a repeated key: encoding/json merges objects
		}
		seen |= bit
		switch string(key) {
		case "time":
			s, ok := p.raw()
			if !ok {
				return false
			}
			w.timeVal = string(s)
			w.Time = &w.timeVal
		case "tenant":
			s, ok := p.raw()
			if !ok {
				return false
			}
			w.tenantVal = p.str(s)
			w.Tenant = &w.tenantVal
		case "key_id":
			ok = p.strTo(&w.KeyID)
		case "user":
			ok = p.strTo(&w.User)
		case "ip":
			ok = p.strTo(&w.IP)
		case "operation":
			ok = p.strTo(&w.Operation)
		case "model":
			ok = p.strTo(&w.Model)
		case "duration":
			ok = p.strTo(&w.Duration)
		case "priority":
			ok = p.smallIntTo(&w.Priority)
		case "tokens":
			w.Tokens, ok = p.int()
		case "cost":
			w.Cost, ok = p.int()
		case "units":
			w.Units, ok = p.units()
		case "actual":
			ok = p.actual(w)
		case "sample":
			ok = p.smallIntTo(&w.Sample)
		case "begin_only":
			ok = p.boolTo(&w.BeginOnly)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	p.ws()
	return p.i == len(p.b)
}

// keyBit numbers the record's keys for parseFast's duplicate check.
func keyBit(k []byte) int {
	switch string(k) {
	case "time":
		return 1
	case "tenant":
		return 2
	case "key_id":
		return 3
	case "user":
		return 4
	case "ip":
		return 5
	case "operation":
		return 6
	case "model":
		return 7
	case "duration":
		return 8
	case "priority":
		return 9
	case "tokens":
		return 10
	case "cost":
		return 11
	case "units":
		return 12
	case "actual":
		return 13
	case "sample":
		return 14
	case "begin_only":
		return 15
	}
	return 0
}

// smallIntTo reads an integer that fits an int into dst.
func (p *fastParser) smallIntTo(dst *int) bool {
	n, ok := p.int()
	*dst = int(n)
	return ok && int64(*dst) == n
}

// boolTo reads true or false into dst.
func (p *fastParser) boolTo(dst *bool) bool {
	switch rest := p.b[p.i:]; {
	case bytes.HasPrefix(rest, []byte("true")):
		*dst, p.i = true, p.i+4
	case bytes.HasPrefix(rest, []byte("false")):
		*dst, p.i = false, p.i+5
	default:
		return false
	}
	return true
}

type fastParser struct {
	b   []byte
	i   int
	str func([]byte) string
}

func (p *fastParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\r' || p.b[p.i] == '\n') {
		p.i++
	}
}

func (p *fastParser) lit(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// raw returns the bytes of a string without escapes or control
// characters, in valid UTF-8.
func (p *fastParser) raw() ([]byte, bool) {
	if !p.lit('"') {
		return nil, false
	}
	start := p.i
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return nil, false
}

func (p *fastParser) strTo(dst *string) bool {
	s, ok := p.raw()
	if ok {
		*dst = p.str(s)
	}
	return ok
}

// int reads an integer written the way JSON allows and int64 holds.
func (p *fastParser) int() (int64, bool) {
	neg := p.lit('-')
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if n > (1<<63)/10 {
			return 0, false
		}
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	digits := p.i - start
	if digits == 0 || digits > 1 && p.b[start] == '0' || n > 1<<63-1 {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	if neg {
		return -int64(n), true
	}
	return int64(n), true
}

// member reads up to the value of an object's next member (after its
// opening brace): the separator, the key and the colon. end reports the
// closing brace instead.
func (p *fastParser) member(first bool) (key []byte, end, ok bool) {
	p.ws()
	if p.lit('}') {
		return nil, true, true
	}
	if !first && !p.lit(',') {
		return nil, false, false
	}
	p.ws()
	if key, ok = p.raw(); !ok {
		return nil, false, false
	}
	p.ws()
	if !p.lit(':') {
		return nil, false, false
	}
	p.ws()
	return key, false, true
}

func (p *fastParser) units() (map[string]int64, bool) {
	if !p.lit('{') {
		return nil, false
	}
	m := map[string]int64{}
	for first := true; ; first = false {
		k, end, ok := p.member(first)
		if !ok {
			return nil, false
		}
		if end {
			return m, true
		}
		n, ok := p.int()
		if !ok {
			return nil, false
		}
		m[string(k)] = n
	}
}

func (p *fastParser) actual(w *recordJSON) bool {
	if !p.lit('{') {
		return false
	}
	a := &actualJSON{}
	w.Actual = a
	// A repeated key (encoding/json would merge) finds its field set.
	for first := true; ; first = false {
		k, end, ok := p.member(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		switch string(k) {
		case "tokens":
			n, ok := p.int()
			if !ok || a.Tokens != nil {
				return false
			}
			a.Tokens = &n
		case "cost":
			n, ok := p.int()
			if !ok || a.Cost != nil {
				return false
			}
			a.Cost = &n
		case "units":
			if a.Units != nil {
				return false
			}
			if a.Units, ok = p.units(); !ok {
				return false
			}
		default:
			return false
		}
	}
}

// interner returns one string per distinct value of the fields that
// repeat (tenants, operations, models), in bounded memory.
type interner struct{ m map[string]string }

const maxInterned = 4096

func (in *interner) str(b []byte) string {
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	if in.m == nil || len(in.m) >= maxInterned {
		in.m = make(map[string]string, 256)
	}
	s := string(b)
	in.m[s] = s
	return s
}
