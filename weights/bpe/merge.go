package bpe

// scratch is the per-call working memory of the merge loop, recycled through
// a sync.Pool so that counting allocates nothing in the steady state.
type scratch struct {
	starts []int32  // part boundaries (linear merge)
	ranks  []uint32 // rank of merging part i with part i+1 (linear merge)
	next   []int32  // heap merge: start of the next part, by part start
	prev   []int32  // heap merge: start of the previous part, by part start
	prank  []uint32 // heap merge: rank of merging the part with its successor
	heap   []uint64 // heap merge: rank<<32 | part start
	buf    []byte   // a piece with invalid UTF-8 replaced by U+FFFD
}

// heapMin is the piece length from which merging uses a heap instead of a
// linear scan for the lowest rank; below it the scan is faster.
const heapMin = 96

// merge applies the byte-pair merges to piece (at least two bytes long): it
// repeatedly joins the adjacent pair whose concatenation has the lowest rank,
// the leftmost on ties, until no adjacent pair is a token. When emit is nil it
// only returns the number of resulting tokens; otherwise it appends their
// ranks to *emit as well.
func (t *table) merge(piece []byte, s *scratch, emit *[]int) int {
	if len(piece) >= heapMin {
		return t.mergeHeap(piece, s, emit)
	}
	return t.mergeLinear(piece, s, emit)
}

// mergeLinear is merge for short pieces: parts sit in an array and each step
// scans it for the lowest rank.
func (t *table) mergeLinear(piece []byte, s *scratch, emit *[]int) int {
	m := len(piece)
	starts := s.starts[:0]
	ranks := s.ranks[:0]
	for i := 0; i <= m; i++ {
		starts = append(starts, int32(i))
	}
	for i := 0; i < m-1; i++ {
		ranks = append(ranks, t.pair[uint16(piece[i])<<8|uint16(piece[i+1])])
	}
	ranks = append(ranks, noRank)
	for {
		best, bi := noRank, -1
		for i, r := range ranks[:len(ranks)-1] {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		// Part bi absorbs part bi+1.
		copy(starts[bi+1:], starts[bi+2:])
		starts = starts[:len(starts)-1]
		copy(ranks[bi+1:], ranks[bi+2:])
		ranks = ranks[:len(ranks)-1]
		if bi+2 < len(starts) {
			ranks[bi] = t.rank(piece[starts[bi]:starts[bi+2]])
		} else {
			ranks[bi] = noRank
		}
		if bi > 0 {
			ranks[bi-1] = t.rank(piece[starts[bi-1]:starts[bi+1]])
		}
	}
	s.starts, s.ranks = starts, ranks
	parts := len(starts) - 1
	if emit != nil {
		for i := 0; i < parts; i++ {
			*emit = append(*emit, int(t.partRank(piece[starts[i]:starts[i+1]])))
		}
	}
	return parts
}

// partRank returns the rank of a part produced by merging, which is a token.
func (t *table) partRank(b []byte) uint32 {
	switch len(b) {
	case 1:
		return t.byteRank[b[0]]
	case 2:
		return t.pair[uint16(b[0])<<8|uint16(b[1])]
	}
	return t.rank(b)
}

// mergeHeap is merge for long pieces: parts form a doubly linked list indexed
// by their start offset and candidate merges sit in a binary min-heap ordered
// by (rank, start), which is exactly the "lowest rank, leftmost first" order.
// Entries are invalidated lazily: a part's candidate rank only ever changes to
// the rank of a strictly longer byte string, so an entry is current iff it
// equals the part's recorded rank.
func (t *table) mergeHeap(piece []byte, s *scratch, emit *[]int) int {
	m := len(piece)
	next := grow32(s.next, m)
	prev := grow32(s.prev, m)
	prank := growU32(s.prank, m)
	h := s.heap[:0]
	for i := 0; i < m; i++ {
		next[i] = int32(i + 1)
		prev[i] = int32(i - 1)
		r := noRank
		if i+1 < m {
			r = t.pair[uint16(piece[i])<<8|uint16(piece[i+1])]
		}
		prank[i] = r
		if r != noRank {
			h = append(h, uint64(r)<<32|uint64(i))
		}
	}
	heapify(h)
	parts := m
	for len(h) > 0 {
		top := h[0]
		h = heapPop(h)
		r, i := uint32(top>>32), int32(uint32(top))
		if prank[i] != r {
			continue
		}
		// Part i absorbs its successor j.
		j := next[i]
		k := next[j]
		next[i] = k
		if int(k) < m {
			prev[k] = i
		}
		prank[j] = noRank
		parts--
		prank[i] = noRank
		if int(k) < m {
			if nr := t.rank(piece[i:next[k]]); nr != noRank {
				prank[i] = nr
				h = heapPush(h, uint64(nr)<<32|uint64(i))
			}
		}
		if p := prev[i]; p >= 0 {
			prank[p] = noRank
			if nr := t.rank(piece[p:k]); nr != noRank {
				prank[p] = nr
				h = heapPush(h, uint64(nr)<<32|uint64(p))
			}
		}
	}
	s.next, s.prev, s.prank, s.heap = next, prev, prank, h
	if emit != nil {
		for i := int32(0); int(i) < m; i = next[i] {
			*emit = append(*emit, int(t.partRank(piece[i:next[i]])))
		}
	}
	return parts
}

func grow32(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n, n+n/4)
	}
	return b[:n]
}

func growU32(b []uint32, n int) []uint32 {
	if cap(b) < n {
		return make([]uint32, n, n+n/4)
	}
	return b[:n]
}

func heapify(h []uint64) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i)
	}
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func heapPop(h []uint64) []uint64 {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	if n > 0 {
		siftDown(h, 0)
	}
	return h
}

func siftDown(h []uint64, i int) {
	n := len(h)
	v := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if v <= h[c] {
			break
		}
		h[i] = h[c]
		i = c
	}
	h[i] = v
}
