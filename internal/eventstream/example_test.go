package eventstream_test

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/eventstream"
)

// A ConverseStream's messages, fed to a Decoder in pieces as they come
// off the wire, come out whole.
func Example() {
	stream := append(eventstream.Event("contentBlockDelta", []byte(`{"delta":{"text":"Hi"}}`)),
		eventstream.Event("metadata", []byte(`{"usage":{"inputTokens":9,"outputTokens":1}}`))...)
	d := eventstream.NewDecoder(1 << 20)
	for i := 0; i < len(stream); i += 10 {
		d.Feed(stream[i:min(i+10, len(stream))])
		for m, ok := d.Next(); ok; m, ok = d.Next() {
			fmt.Println(m.Get(":event-type"), string(m.Payload))
		}
	}
	fmt.Println(d.Err(), d.Pending())
	// Output:
	// contentBlockDelta {"delta":{"text":"Hi"}}
	// metadata {"usage":{"inputTokens":9,"outputTokens":1}}
	// <nil> 0
}
