package weights

import (
	"hash/maphash"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// keySet finds repeated keys among the members of the objects being read,
// with no allocation per member: one open-addressing table holds the keys
// of every object currently open, each tagged with its object, and an
// object's keys are removed when it closes, newest first. Removing linear
// probing's entries in the reverse order of their insertion restores the
// table exactly as it was, so no tombstones are needed.
type keySet struct {
	slots   []keySlot // a power of two, at most half full
	log     []int32   // the slot of each key, in insertion order
	objects int32     // objects opened so far
	seed    maphash.Seed
	scratch []byte
}

type keySlot struct {
	h     uint64
	raw   string // the key as written in the body
	obj   int32
	dirty bool // raw must be decoded (see jsonscan.Scanner.Str)
	used  bool
}

// open starts a new object and returns its tag and the mark to release
// its keys with.
func (k *keySet) open() (obj int32, mark int) {
	k.objects++
	return k.objects, len(k.log)
}

// release removes the keys added since mark.
func (k *keySet) release(mark int) {
	for i := len(k.log) - 1; i >= mark; i-- {
		k.slots[k.log[i]] = keySlot{}
	}
	k.log = k.log[:mark]
}

// insert adds the key of a member of object obj (key decoded; raw and
// dirty as in the body) and reports whether that object already had it.
func (k *keySet) insert(obj int32, key, raw string, dirty bool) (repeated bool) {
	if len(k.slots) == 0 {
		k.seed = maphash.MakeSeed()
		k.slots = make([]keySlot, 64)
	}
	if 2*(len(k.log)+1) > len(k.slots) {
		k.grow()
	}
	h := maphash.String(k.seed, key) ^ uint64(obj)*0x9e3779b97f4a7c15
	mask := len(k.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := &k.slots[i]
		if !s.used {
			*s = keySlot{h: h, raw: raw, obj: obj, dirty: dirty, used: true}
			k.log = append(k.log, int32(i))
			return false
		}
		if s.h == h && s.obj == obj && k.equal(s, key) {
			return true
		}
	}
}

func (k *keySet) equal(s *keySlot, key string) bool {
	if !s.dirty {
		return s.raw == key
	}
	k.scratch, _ = jsonscan.AppendUnquote(k.scratch[:0], s.raw)
	return string(k.scratch) == key
}

// grow doubles the table, inserting the keys again in their order.
func (k *keySet) grow() {
	old := k.slots
	k.slots = make([]keySlot, 2*len(old))
	mask := len(k.slots) - 1
	for j, si := range k.log {
		e := old[si]
		i := int(e.h) & mask
		for k.slots[i].used {
			i = (i + 1) & mask
		}
		k.slots[i] = e
		k.log[j] = int32(i)
	}
}

// reset empties the set and drops what it refers to.
func (k *keySet) reset() {
	k.release(0)
	if len(k.slots) > 4096 {
		k.slots, k.log = nil, nil
	}
	k.scratch = k.scratch[:0]
	if cap(k.scratch) > 64<<10 {
		k.scratch = nil
	}
}
