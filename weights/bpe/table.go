package bpe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// noRank marks a byte sequence that is not a token.
const noRank = ^uint32(0)

// table maps token bytes to ranks. Token bytes live in one arena in rank
// order; an open-addressing hash table with linear probing indexes them. A
// slot packs everything a lookup needs, so it touches one slot and the
// candidate's bytes: bits 0-21 hold the token's arena offset, 22-29 its
// length, 30-47 its rank+1 (0 marks an empty slot) and 48-63 the top bits of
// its hash.
type table struct {
	slots  []uint64
	mask   uint64
	arena  []byte
	offs   []uint32 // token r is arena[offs[r]:offs[r+1]]
	maxLen int      // longest token, in bytes

	byteRank [256]uint32
	pair     []uint32 // rank of the two-byte token a<<8|b, or noRank
}

// loadTable parses a .tiktoken file (one "base64(token) rank" per line, ranks
// 0, 1, 2, ... in order) as embedded by github.com/pkoukk/tiktoken-go-loader.
func loadTable(file string) (*table, error) {
	data, err := assets.Assets.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("bpe: reading ranks: %w", err)
	}
	return parseTable(file, data)
}

// parseTable builds the table of the .tiktoken data read from file. One pass
// decodes the base64 and checks the ranks, without a call per line.
func parseTable(file string, data []byte) (*table, error) {
	lines := bytes.Count(data, []byte{'\n'}) + 1
	t := &table{offs: make([]uint32, 1, lines+1)}
	arena := make([]byte, len(data)/4*3+3)
	w := 0
	for i, ln := 0, 1; i < len(data); ln++ {
		if data[i] == '\n' {
			i++
			continue
		}
		// base64(token): quanta of four characters, the last maybe padded.
		start := w
		for i < len(data) && data[i] != ' ' {
			if i+4 > len(data) {
				return nil, fmt.Errorf("bpe: %s:%d: bad token", file, ln)
			}
			a, b, c, d := b64[data[i]], b64[data[i+1]], b64[data[i+2]], b64[data[i+3]]
			if a|b|c|d < 64 {
				arena[w] = a<<2 | b>>4
				arena[w+1] = b<<4 | c>>2
				arena[w+2] = c<<6 | d
				w += 3
				i += 4
				continue
			}
			switch {
			case a|b < 64 && c == pad && d == pad:
				arena[w] = a<<2 | b>>4
				w++
				i += 4
			case a|b|c < 64 && d == pad:
				arena[w] = a<<2 | b>>4
				arena[w+1] = b<<4 | c>>2
				w += 2
				i += 4
			}
			break
		}
		if w == start || i >= len(data) || data[i] != ' ' {
			return nil, fmt.Errorf("bpe: %s:%d: bad token", file, ln)
		}
		i++ // the space
		rank, digits := 0, 0
		for ; i < len(data) && data[i] != '\n'; i++ {
			c := data[i] - '0'
			if c > 9 || digits == 9 {
				return nil, fmt.Errorf("bpe: %s:%d: bad rank", file, ln)
			}
			rank = rank*10 + int(c)
			digits++
		}
		if digits == 0 || rank != len(t.offs)-1 {
			return nil, fmt.Errorf("bpe: %s:%d: rank out of sequence", file, ln)
		}
		t.offs = append(t.offs, uint32(w))
		t.maxLen = max(t.maxLen, w-start)
	}
	t.arena = arena[:w:w]
	if err := t.build(); err != nil {
		return nil, fmt.Errorf("bpe: %s: %w", file, err)
	}
	return t, nil
}

// b64 maps the characters of the standard base64 alphabet to their values,
// '=' to pad and every other byte to bad.
var b64 = func() (t [256]byte) {
	for i := range t {
		t[i] = bad
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range len(alphabet) {
		t[alphabet[i]] = byte(i)
	}
	t['='] = pad
	return t
}()

const (
	pad = 64
	bad = 128
)

// Slot layout.
const (
	offBits  = 22
	lenBits  = 8
	rankBits = 18
	lenShift = offBits
	rankShft = offBits + lenBits
	tagShift = 48
)

// build fills the hash index and the one- and two-byte tables.
func (t *table) build() error {
	n := len(t.offs) - 1
	if len(t.arena) >= 1<<offBits || n+1 >= 1<<rankBits || t.maxLen >= 1<<lenBits {
		return fmt.Errorf("vocabulary too large for the index (%d tokens, %d bytes)", n, len(t.arena))
	}
	size := 1 << bits.Len(uint(n*2)) // load factor between 1/4 and 1/2
	t.slots = make([]uint64, size)
	t.mask = uint64(size - 1)
	t.pair = make([]uint32, 1<<16)
	for i := range t.pair {
		t.pair[i] = noRank
	}
	for i := range t.byteRank {
		t.byteRank[i] = noRank
	}
	for r := 0; r < n; r++ {
		tok := t.arena[t.offs[r]:t.offs[r+1]]
		switch len(tok) {
		case 1:
			t.byteRank[tok[0]] = uint32(r)
		case 2:
			t.pair[uint16(tok[0])<<8|uint16(tok[1])] = uint32(r)
		}
		h := hash(tok)
		i := h & t.mask
		for t.slots[i] != 0 {
			i = (i + 1) & t.mask
		}
		t.slots[i] = h>>tagShift<<tagShift | uint64(r+1)<<rankShft | uint64(len(tok))<<lenShift | uint64(t.offs[r])
	}
	return nil
}

// rank returns the rank of the token whose bytes are key, or noRank.
func (t *table) rank(key []byte) uint32 {
	h := hash(key)
	want := h>>tagShift<<tagShift | uint64(len(key))<<lenShift
	const match = (1<<64-1)>>tagShift<<tagShift | (1<<lenBits-1)<<lenShift
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		s := t.slots[i]
		if s == 0 {
			return noRank
		}
		if s&match == want {
			off := s & (1<<offBits - 1)
			if string(t.arena[off:off+uint64(len(key))]) == string(key) {
				return uint32(s>>rankShft&(1<<rankBits-1)) - 1
			}
		}
	}
}

// token returns the bytes of token r.
func (t *table) token(r uint32) []byte {
	return t.arena[t.offs[r]:t.offs[r+1]:t.offs[r+1]]
}

// hash is a fast non-cryptographic hash of short byte strings.
func hash(b []byte) uint64 {
	const (
		m1 = 0x9e3779b97f4a7c15
		m2 = 0xbf58476d1ce4e5b9
	)
	h := uint64(len(b)) * m1
	for len(b) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * m2
		h ^= h >> 29
		b = b[8:]
	}
	var v uint64
	switch n := len(b); {
	case n >= 4:
		v = uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[n-4:]))<<32
	case n > 0:
		v = uint64(b[0]) | uint64(b[n>>1])<<8 | uint64(b[n-1])<<16
	}
	h = (h ^ v) * m1
	return h ^ h>>32
}
