package redisstore

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
// chunks) and the read-only script of each algorithm, to be what it
// makes now. After a change to the Lua, run go
// generate and read the difference.
func TestScriptsCurrent(t *testing.T) {
	single := []string{"b", "f", "w", "s", "l", "q"}
	shapes := append(single[:len(single):len(single)], "bbl", "fwsq", "bfwslqbfw")
	for _, kind := range []struct {
		name   string
		gen    func([]limits.Algorithm) string
		shapes []string
	}{{"acquire", genAcquire, shapes}, {"settle", genSettle, shapes}, {"peek", genPeek, single}} {
		for _, shape := range kind.shapes {
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

// readCommands are the commands a peek script may call: reads, and TIME.
var readCommands = map[string]bool{
	"GET": true, "MGET": true, "HGET": true, "HMGET": true, "HGETALL": true,
	"ZRANGE": true, "ZRANGEBYSCORE": true, "ZCARD": true, "TIME": true,
}

// TestPeekScriptsRead requires the peek script of every algorithm to call
// read commands only, and to call some (a script that reads nothing
// answers nothing about the partition).
func TestPeekScriptsRead(t *testing.T) {
	call := regexp.MustCompile(`redis\.call\('([A-Za-z]+)'`)
	for code, alg := range goldenAlgs {
		src := genPeek([]limits.Algorithm{alg})
		calls := call.FindAllStringSubmatch(src, -1)
		if len(calls) < 2 {
			t.Errorf("peek script of %c calls %d commands; want TIME and a read at least", code, len(calls))
		}
		for _, c := range calls {
			if !readCommands[strings.ToUpper(c[1])] {
				t.Errorf("peek script of %c calls %s; want reads only", code, c[1])
			}
		}
	}
}
