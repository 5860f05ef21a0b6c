// Package benchcpu adds a cpu-ns/op metric to benchmarks: the process CPU
// time (all threads, garbage collection included) per operation. Unlike
// ns/op it does not grow when other processes compete for the machine, so
// ratios between a benchmark and its peer stay comparable on a busy host.
// For a parallel benchmark it is the CPU spent per operation by all
// goroutines together.
package benchcpu

import (
	"testing"
	"time"
)

// A Clock is the process CPU time at a benchmark's start.
type Clock struct {
	start time.Duration
	ok    bool
}

// Start reads the process CPU time; call it after b.ResetTimer or before
// the loop.
func Start() Clock {
	t, ok := processCPU()
	return Clock{t, ok}
}

// Report adds cpu-ns/op to b for the CPU time used since c was started.
func (c Clock) Report(b *testing.B) {
	if t, ok := processCPU(); ok && c.ok && b.N > 0 {
		b.ReportMetric(float64(t-c.start)/float64(b.N), "cpu-ns/op")
	}
}

func processCPU() (time.Duration, bool) {
	return rusage()
}
