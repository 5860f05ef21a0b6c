package redisstore

import (
	"sync/atomic"
	"time"
)

// breaker stops calls to a failing Redis: after threshold consecutive
// failures it opens, and every call fails at once until cooldown has
// passed; then one probe call goes through, whose success closes it and
// whose failure opens it for another cooldown. The closed path costs two
// atomic loads and no clock read.
type breaker struct {
	threshold int32
	cooldown  int64 // ns
	onChange  func(open bool)

	failures  atomic.Int32
	openUntil atomic.Int64 // unix ns; 0 when closed
	probing   atomic.Bool
}

// allow reports whether a call may go to Redis now.
func (b *breaker) allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if b.refusing() {
		return false
	}
	return b.probing.CompareAndSwap(false, true)
}

// refusing reports whether the breaker is open and its cooldown has not
// passed: allow would refuse. It takes no probe slot.
func (b *breaker) refusing() bool {
	until := b.openUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// success records a successful call.
func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if b.openUntil.Load() != 0 {
		if b.openUntil.Swap(0) != 0 {
			b.onChange(false)
		}
		b.probing.Store(false)
	}
}

// failure records a failed call.
func (b *breaker) failure() {
	if b.probing.Load() {
		b.openUntil.Store(time.Now().UnixNano() + b.cooldown)
		b.probing.Store(false)
		return
	}
	if n := b.failures.Add(1); n >= b.threshold {
		if b.openUntil.CompareAndSwap(0, time.Now().UnixNano()+b.cooldown) {
			b.onChange(true)
		}
	}
}

// abandon records a call the caller gave up on: it says nothing about
// Redis, but frees the probe slot.
func (b *breaker) abandon() {
	if b.openUntil.Load() != 0 {
		b.probing.Store(false)
	}
}
