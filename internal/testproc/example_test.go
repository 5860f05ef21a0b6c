package testproc_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/testproc"
)

func ExampleLastLines() {
	out := "starting\nlistening on 127.0.0.1:6390\nbind: address already in use\nexiting\n"
	fmt.Println(testproc.LastLines(out, 2))
	// Output: bind: address already in use | exiting
}

func ExampleFreePort() {
	port, err := testproc.FreePort()
	fmt.Println(err == nil && port > 0 && port < 65536)
	// Output: true
}
