package redisstore

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/admission/limits"
)

var update = flag.Bool("update", false, "write the scripts of testdata/scripts (go generate)")

// goldenAlgs names the algorithms in the file names of testdata/scripts.
var goldenAlgs = map[byte]limits.Algorithm{
	'b': limits.TokenBucket, 'f': limits.FixedWindow, 'w': limits.SlidingWindow,
	's': limits.SlidingLog, 'l': limits.Concurrency, 'q': limits.Quota,
}

// TestScriptsCurrent requires the scripts committed in testdata/scripts,
// a reader's view of what the generator makes for the common sequences of
// algorithms (each alone, a request's requests and tokens buckets with its
// concurrency limit, the four other algorithms together, and a call of two
// chunks), to be what it makes now. After a change to the Lua, run go
// generate and read the difference.
func TestScriptsCurrent(t *testing.T) {
	shapes := []string{"b", "f", "w", "s", "l", "q", "bbl", "fwsq", "bfwslqbfw"}
	for _, kind := range []struct {
		name string
		gen  func([]limits.Algorithm) string
	}{{"acquire", genAcquire}, {"settle", genSettle}} {
		for _, shape := range shapes {
			algs := make([]limits.Algorithm, len(shape))
			for i := range shape {
				algs[i] = goldenAlgs[shape[i]]
			}
			path := filepath.Join("testdata", "scripts", kind.name+"-"+shape+".lua")
			got := kind.gen(algs)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go generate ./admission/redisstore)", err)
			}
			if got != string(want) {
				t.Errorf("%s: the generator's script differs from the committed one; run go generate ./admission/redisstore and review the difference", path)
			}
		}
	}
}
