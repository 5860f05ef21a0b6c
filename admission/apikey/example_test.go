package apikey_test

import (
	"fmt"

	"github.com/sluicehq/sluice/admission/apikey"
)

// A key is kept only as its hash; logs and partition keys use its ID.
func ExampleSum() {
	h := apikey.Sum("sk-example-acme-1")
	fmt.Println(h)
	fmt.Println(h.ID())
	back, err := apikey.ParseHash(h.String())
	fmt.Println(back == h, err)
	// Output:
	// sha256:e441e10e484da43fa24e869bb226e626905ba748647185f3d0cccd011c2e0b1c
	// key_e441e10e484d
	// true <nil>
}
