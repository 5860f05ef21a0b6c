package memstore

import (
	"fmt"
	"hash/maphash"
	"testing"
)

// TestShardsSpreadKeys: keys that differ only in their last characters,
// as tenant names and numbered keys do, spread over the shards, whatever
// the table's seed. (The shard was once taken from the low bits of a
// multiplication, which depend only on the low bytes of the key's ends:
// every key of the form flood-NNN, and every tenant t000000–t099999,
// fell into one shard, so one lock served the whole table and eviction
// sampled that shard alone.)
func TestShardsSpreadKeys(t *testing.T) {
	families := map[string]func(i int) string{
		"flood-NNN":        func(i int) string { return fmt.Sprintf("flood-%d", 100+i) },
		"tNNNNNN":          func(i int) string { return fmt.Sprintf("t%06d", i) },
		"caller-N":         func(i int) string { return fmt.Sprintf("caller-%c", 'a'+i%26) + fmt.Sprint(i/26) },
		"short":            func(i int) string { return fmt.Sprint(i) },
		"tenant\\x1fmodel": func(i int) string { return fmt.Sprintf("tenant-%04d\x1fgpt-4o-mini", i) },
	}
	for name, key := range families {
		for range 5 {
			seed := maphash.MakeSeed()
			var count [numShards]int
			const keys = 900
			for i := range keys {
				count[shardIndex(maphash.String(seed, key(i)))]++
			}
			used, most := 0, 0
			for _, n := range count {
				if n > 0 {
					used++
				}
				most = max(most, n)
			}
			// 900 keys over 64 shards: about 14 each. A fair hash
			// leaves a shard empty once in 20,000 tables, eight never
			// (below 1e-30), and none holds three times the mean.
			if used < numShards-8 || most > 3*keys/numShards {
				t.Errorf("%s: %d of %d shards used, the fullest holding %d of %d keys", name, used, numShards, most, keys)
			}
		}
	}
}
