package gateway

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// WithResponseRecords keeps the Responses API's records (the size and
// owner of each response, see ResponsesAPI) on the Redis server of c,
// shared by every gateway given the same server, under the bounds of
// Config.Responses and for its RecordTTL after their last write. Nil, the
// default, keeps them in this gateway's memory.
func WithResponseRecords(c redis.UniversalClient) Option {
	return func(o *options) { o.responseRedis = c }
}

// redisRecords is the responseRecords on Redis: one hash of every record
// (field tenant NUL id, value the tokens), a list of its fields oldest
// first, and a list of each tenant's ids oldest first, all under one hash
// tag so that a Redis Cluster keeps them on one node, for the one script
// that writes them.
type redisRecords struct {
	c              redis.UniversalClient
	max, perTenant int
	ttl            time.Duration
}

var _ responseRecords = (*redisRecords)(nil)

// The keys of the records.
const (
	recordsHash  = "sluice:{responses}:records"
	recordsOrder = "sluice:{responses}:order"
	recordsOwner = "sluice:{responses}:tenant:"
)

// putRecord records a size (KEYS: hash, order, the tenant's list; ARGV:
// field, id, tokens, max, per tenant, ttl in ms, the tenant's field
// prefix). A record evicted from its tenant's list stays in the order
// list until it comes first: the order list is bounded at twice the
// records, so that stale entries never make it grow without bound.
var putRecord = redis.NewScript(`
local new = redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if new == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  redis.call('RPUSH', KEYS[3], ARGV[2])
end
local per, max = tonumber(ARGV[5]), tonumber(ARGV[4])
while redis.call('LLEN', KEYS[3]) > per do
  redis.call('HDEL', KEYS[1], ARGV[7] .. redis.call('LPOP', KEYS[3]))
end
while redis.call('HLEN', KEYS[1]) > max or redis.call('LLEN', KEYS[2]) > 2 * max do
  local old = redis.call('LPOP', KEYS[2])
  if not old then break end
  redis.call('HDEL', KEYS[1], old)
end
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[6]) end
return new
`)

func recordField(tenant, id string) string { return tenant + "\x00" + id }

func (r *redisRecords) get(ctx context.Context, tenant, id string) (int64, bool, error) {
	v, err := r.c.HGet(ctx, recordsHash, recordField(tenant, id)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		// Not a value this gateway writes: the record is no proof.
		return 0, false, errors.New("gateway: a response record on Redis is not a token count")
	}
	return n, true, nil
}

func (r *redisRecords) put(ctx context.Context, tenant, id string, tokens int64) error {
	keys := []string{recordsHash, recordsOrder, recordsOwner + tenant}
	return putRecord.Run(ctx, r.c, keys, recordField(tenant, id), id, max(tokens, 0), r.max, r.perTenant, r.ttl.Milliseconds(), tenant+"\x00").Err()
}

func (r *redisRecords) forget(ctx context.Context, tenant, id string) error {
	return r.c.HDel(ctx, recordsHash, recordField(tenant, id)).Err()
}
