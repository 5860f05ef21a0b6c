package browsertest_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/browsertest"
)

// Chromium writes a page's console messages, uncaught errors included,
// to its log; Console finds them among the other lines.
func ExampleConsole() {
	log := `[1:1:1201/114550.104:ERROR:dbus/bus.cc:405] Failed to connect to the bus
[1:1:1201/114550.105:INFO:CONSOLE:1] "Uncaught ReferenceError: f is not defined", source: file:///tmp/page.html (1)`
	for _, m := range browsertest.Console(log) {
		fmt.Println(m)
	}
	// Output:
	// [1:1:1201/114550.105:INFO:CONSOLE:1] "Uncaught ReferenceError: f is not defined", source: file:///tmp/page.html (1)
}
