package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
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
		if h.settle(cmd.Args()) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.repeated.Add(1)
		}
		return next(ctx, cmd)
	}
}

// settle reports whether args call a settle script or function.
func (h *repeatSettles) settle(args []any) bool {
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	switch strings.ToLower(name) {
	case "evalsha", "fcall":
		return redisstore.IsSettleScript(arg)
	case "eval":
		sum := sha1.Sum([]byte(arg))
		return redisstore.IsSettleScript(hex.EncodeToString(sum[:]))
	}
	return false
}

// newRepeatingClient returns a client of the server that sends every
// settle call twice (see repeatSettles), closed when the test ends.
func newRepeatingClient(t testing.TB, addr string) (*redis.Client, *repeatSettles) {
	c := newClient(t, addr)
	h := &repeatSettles{}
	c.AddHook(h)
	return c, h
}
