//go:build !linux

package main

import (
	"os/exec"
	"time"
)

// raiseFileLimit leaves the limit on open files as it is here.
func raiseFileLimit() {}

// processCPU is not measured here: the streams scenario reports no CPU.
func processCPU() time.Duration { return 0 }

// setDeathSignal has no equivalent here: a child outlives a parent that
// dies without stopping it, until its standard input closes.
func setDeathSignal(*exec.Cmd) {}

// processIO is not counted here.
func processIO() (reads, writes int64) { return 0, 0 }

// pidCPU is 0 where /proc is not there.
func pidCPU(int) time.Duration { return 0 }
