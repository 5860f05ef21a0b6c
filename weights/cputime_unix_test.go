//go:build unix

package weights

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used.
// Benchmarks report it per operation as cpu-ns/op, which, unlike ns/op,
// does not grow when other processes compete for the machine.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
