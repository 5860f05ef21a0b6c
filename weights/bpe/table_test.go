package bpe

import (
	"strings"
	"testing"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// TestTableMatchesLoader compares the parsed vocabulary with the map the
// reference builds from the same file: same size, same bytes for every rank.
func TestTableMatchesLoader(t *testing.T) {
	for _, e := range encodings(t) {
		want, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(e.Name() + ".tiktoken")
		if err != nil {
			t.Fatal(err)
		}
		if got := len(e.t.offs) - 1; got != len(want) {
			t.Errorf("%s: %d tokens; the loader has %d", e.Name(), got, len(want))
		}
		for tok, r := range want {
			if r < 0 || r >= len(e.t.offs)-1 || string(e.t.token(uint32(r))) != tok {
				t.Fatalf("%s: token %d is missing or differs from the loader's %q", e.Name(), r, tok)
			}
		}
	}
}

// TestTableIndexesEveryToken looks every token up by its bytes: the index
// must return its own rank (which also proves the tokens are distinct, as
// the reference's map from bytes to rank requires), and every byte must be a
// token.
func TestTableIndexesEveryToken(t *testing.T) {
	for _, e := range encodings(t) {
		tab := e.t
		for r := uint32(0); int(r) < len(tab.offs)-1; r++ {
			tok := tab.token(r)
			if got := tab.rank(tok); got != r {
				t.Fatalf("%s: rank(%q) = %d; want %d", e.Name(), tok, got, r)
			}
			if got := tab.partRank(tok); got != r {
				t.Fatalf("%s: partRank(%q) = %d; want %d", e.Name(), tok, got, r)
			}
		}
		for c := range 256 {
			if tab.byteRank[c] == noRank {
				t.Errorf("%s: byte %#x is not a token", e.Name(), c)
			}
		}
		if got := tab.rank([]byte("definitely not a single token")); got != noRank {
			t.Errorf("%s: rank of a long phrase = %d; want noRank", e.Name(), got)
		}
	}
}

func TestLoadTableErrors(t *testing.T) {
	if _, err := loadTable("missing.tiktoken"); err == nil || !strings.Contains(err.Error(), "reading ranks") {
		t.Errorf(`loadTable("missing.tiktoken") error = %v; want a reading error`, err)
	}
	for _, in := range []string{
		"IQ== 1\n",          // rank out of sequence
		"IQ== 0\nIg 1\n",    // truncated base64
		"IQ== 0\nI@== 1\n",  // not base64
		"IQ== x\n",          // rank not a number
		"IQ==\n",            // no rank
		" 0\n",              // empty token
		"IQ== 0123456789\n", // rank too long
	} {
		if _, err := parseTable("test", []byte(in)); err == nil {
			t.Errorf("parseTable(%q) succeeded; want an error", in)
		}
	}
	tab, err := parseTable("test", []byte("IQ== 0\nIg== 1\nISI= 2\nISIj 3"))
	if err != nil {
		t.Fatalf("parseTable: %v", err)
	}
	for r, want := range []string{"!", "\"", "!\"", "!\"#"} {
		if got := string(tab.token(uint32(r))); got != want {
			t.Errorf("token %d = %q; want %q", r, got, want)
		}
	}
}
