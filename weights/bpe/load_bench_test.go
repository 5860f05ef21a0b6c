package bpe

import "testing"

// BenchmarkLoad measures the work of a cold start: parsing the embedded ranks
// and building the index of each encoding, and filling the rune class table
// (done once at package initialisation).
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{O200kBase, Cl100kBase} {
		b.Run("enc="+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := loadTable(name + ".tiktoken"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("classes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buildBMPClass()
		}
	})
}
