package requestlog

import (
	"strings"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// parseFast decodes the common shape of a record without reflection: a
// flat object of known keys whose strings have no escapes and whose
// numbers are plain integers. It reports false for anything else, and the
// caller then decodes the line with encoding/json, which accepts the same
// records and explains what is wrong with the others. Strings are made by
// str, which may intern them.
func parseFast(line []byte, w *recordJSON, str func([]byte) string) bool {
	p := fastParser{b: line, str: str}
	p.sc.ResetBytes(line)
	if p.sc.Peek() != '{' {
		return false
	}
	p.sc.Open()
	var seen uint32
	for n := 0; p.sc.More(&n, '}'); {
		key, ok := p.key()
		if !ok {
			return false
		}
		bit := uint32(1) << keyBit(key)
		if seen&bit != 0 {
			return false // a repeated key: encoding/json merges objects
		}
		seen |= bit
		switch key {
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
		case "session":
			ok = p.strTo(&w.Session)
		case "fingerprint":
			ok = p.strTo(&w.Fingerprint)
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
	p.sc.End()
	return p.sc.Err() == nil
}

// keyBit numbers the record's keys for parseFast's duplicate check.
func keyBit(k string) int {
	switch k {
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
	case "session":
		return 16
	case "fingerprint":
		return 17
	}
	return 0
}

// fastParser reads a record with the module's JSON scanner, in place.
type fastParser struct {
	b   []byte
	sc  jsonscan.Scanner
	str func([]byte) string
}

// key reads a member's key, when it is written without escapes.
func (p *fastParser) key() (string, bool) {
	k, dirty := p.sc.Key()
	return k, !dirty && p.sc.Err() == nil
}

// smallIntTo reads an integer that fits an int into dst.
func (p *fastParser) smallIntTo(dst *int) bool {
	n, ok := p.int()
	*dst = int(n)
	return ok && int64(*dst) == n
}

// boolTo reads true or false into dst.
func (p *fastParser) boolTo(dst *bool) bool {
	c := p.sc.Peek()
	if c != 't' && c != 'f' {
		return false
	}
	p.sc.Literal()
	*dst = c == 't'
	return p.sc.Err() == nil
}

// raw returns the bytes of a string without escapes, in valid UTF-8.
func (p *fastParser) raw() ([]byte, bool) {
	if p.sc.Peek() != '"' {
		return nil, false
	}
	start := p.sc.Pos() + 1
	if _, dirty := p.sc.Str(); dirty || p.sc.Err() != nil {
		return nil, false
	}
	return p.b[start : p.sc.Pos()-1], true
}

func (p *fastParser) strTo(dst *string) bool {
	s, ok := p.raw()
	if ok {
		*dst = p.str(s)
	}
	return ok
}

// int reads an integer as encoding/json decodes it into an int64.
func (p *fastParser) int() (int64, bool) {
	if c := p.sc.Peek(); c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	return jsonscan.Int64(p.sc.Number())
}

func (p *fastParser) units() (map[string]int64, bool) {
	if p.sc.Peek() != '{' {
		return nil, false
	}
	p.sc.Open()
	m := map[string]int64{}
	for n := 0; p.sc.More(&n, '}'); {
		k, ok := p.key()
		if !ok {
			return nil, false
		}
		v, ok := p.int()
		if !ok {
			return nil, false
		}
		m[strings.Clone(k)] = v // k is a view of the line
	}
	return m, p.sc.Err() == nil
}

func (p *fastParser) actual(w *recordJSON) bool {
	if p.sc.Peek() != '{' {
		return false
	}
	p.sc.Open()
	a := &actualJSON{}
	w.Actual = a
	// A repeated key (encoding/json would merge) finds its field set.
	for n := 0; p.sc.More(&n, '}'); {
		k, ok := p.key()
		if !ok {
			return false
		}
		switch k {
		case "tokens":
			v, ok := p.int()
			if !ok || a.Tokens != nil {
				return false
			}
			a.Tokens = &v
		case "cost":
			v, ok := p.int()
			if !ok || a.Cost != nil {
				return false
			}
			a.Cost = &v
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
	return p.sc.Err() == nil
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
