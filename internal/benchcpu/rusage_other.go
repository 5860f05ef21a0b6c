//go:build !unix

package benchcpu

import "time"

// rusage is not available here: no cpu-ns/op is reported.
func rusage() (time.Duration, bool) { return 0, false }
