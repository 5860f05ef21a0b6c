package bpe

import (
	"sync"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

var refOnce = sync.OnceValue(func() map[string]*tiktoken.Tiktoken {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	m := map[string]*tiktoken.Tiktoken{}
	for _, name := range []string{O200kBase, Cl100kBase} {
		tk, err := tiktoken.GetEncoding(name)
		if err != nil {
			panic(err)
		}
		m[name] = tk
	}
	return m
})

// reference returns tiktoken-go's encoder for the named encoding.
func reference(t testing.TB, name string) *tiktoken.Tiktoken {
	t.Helper()
	return refOnce()[name]
}

// encodings lists the encodings under test.
func encodings(t testing.TB) []*Encoding {
	t.Helper()
	var es []*Encoding
	for _, name := range []string{O200kBase, Cl100kBase} {
		e, err := Get(name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		es = append(es, e)
	}
	return es
}
