package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/admission/redisstore"
)

// repeatSettles is a client hook that sends every settle call twice, as a
// client that retries after losing the first reply does: the first call
// runs on the server, its reply is dropped, and the caller sees the second.
type repeatSettles struct {
	repeated atomic.Int64
}

func (h *repeatSettles) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *repeatSettles) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *repeatSettles) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if redisstore.IsSettleCall(cmd.Args()) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.repeated.Add(1)
		}
		return next(ctx, cmd)
	}
}

// newRepeatingClient returns a client of the server that sends every
// settle call twice (see repeatSettles), closed when the test ends.
func newRepeatingClient(t testing.TB, addr string) (*redis.Client, *repeatSettles) {
	c := newClient(t, addr)
	h := &repeatSettles{}
	c.AddHook(h)
	return c, h
}
