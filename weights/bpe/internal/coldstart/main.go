// Command coldstart measures, in a fresh process, how long the first call to
// an encoding takes: loading the embedded ranks, building the index and
// counting one short text.
//
//	go run ./weights/bpe/internal/coldstart
package main

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/weights/bpe"
)

func main() {
	for _, name := range []string{bpe.O200kBase, bpe.Cl100kBase} {
		start := time.Now()
		e, err := bpe.Get(name)
		if err != nil {
			panic(err)
		}
		n := e.CountString("Hello, world!")
		fmt.Printf("%s: first count (%d tokens) after %v\n", name, n, time.Since(start).Round(10*time.Microsecond))
	}
}
