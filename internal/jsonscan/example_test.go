package jsonscan_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/jsonscan"
)

// A reader of one member of an object: the others are checked and
// skipped, and the whole text must be valid.
func Example() {
	var sc jsonscan.Scanner
	sc.Reset(`{"model":"gpt-4o","max_tokens":1e3,"meta":{"a":[1,2]}}`)
	if sc.Peek() != '{' {
		fmt.Println("not an object")
		return
	}
	sc.Open()
	for n := 0; sc.More(&n, '}'); {
		key, _ := sc.Key()
		if key == "max_tokens" && sc.Peek() != '"' {
			v, ok := jsonscan.Integral(sc.Number())
			fmt.Println(key, v, ok)
			continue
		}
		fmt.Println(key, sc.Value())
	}
	sc.End()
	fmt.Println(sc.Err())
	// Output:
	// model "gpt-4o"
	// max_tokens 1000 true
	// meta {"a":[1,2]}
	// <nil>
}
