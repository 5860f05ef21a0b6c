package bpe_test

import (
	"fmt"

	"github.com/sluicehq/sluice/weights/bpe"
)

func Example() {
	enc := bpe.O200k()
	text := []byte("Sluice counts tokens exactly, even <|endoftext|>.")
	fmt.Println(enc.Count(text))
	tokens := enc.Encode(nil, text)
	fmt.Println(len(tokens), string(enc.Decode(nil, tokens)))

	cl, err := bpe.Get("cl100k_base")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cl.CountString("Sluice counts tokens exactly, even <|endoftext|>."))
	// Output:
	// 15
	// 15 Sluice counts tokens exactly, even <|endoftext|>.
	// 14
}
