// Package backend is the contract a limit store implements, as
// database/sql/driver is to database/sql: package admission is what a
// service calls, this package is what a store provides. A store holds the
// state of limiters, in this process (admission/memstore, the default) or
// in a shared backend such as Redis (admission/redisstore), so that several
// replicas enforce one limit.
//
// A Store makes one Limiter per policy. The controller calls a Limiter with
// each partition's key and Limit (package limits), the request's amount
// and its instant; the Limiter answers in a Grant. Everything beyond that
// is an optional interface, checked once when a policy is installed:
//
//   - Batcher: several policies on one store evaluated in one round trip,
//     atomically (all or nothing for enforcing policies);
//   - Renewer: concurrency leases extended while long work runs;
//   - RenewBatcher: many leases of a store renewed in one round trip (the
//     lease keeper's renewals);
//   - Forgetter: a lease the process holds no more (its ticket dropped,
//     its lease expired unrenewed) taken out of a store's own count;
//   - Peeker: a partition's figures read without writing (what is left,
//     for Controller.Remaining);
//   - Inspector: partitions counted and evictions reported, for stores
//     whose state is in this process.
//
// A store's figures must be the in-memory store's, to the nanosecond:
// BucketFigures and limits.QuotaPeriod give the formulas, and
// admission/backend/backendtest holds the conformance suite every store
// runs (step tables of every algorithm, and property tests over random
// traffic). Amounts arrive in [0, limits.MaxAmount]; a store keeps the debt
// bound described on Limiter.Adjust.
package backend
