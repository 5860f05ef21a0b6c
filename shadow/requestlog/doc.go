// Package requestlog is the request log: one JSON object per request, in
// the format Record describes, that package shadow/replay (and admitctl
// replay) reads to answer "what if these limits had been in place?".
//
// A Writer writes the log from live traffic without ever blocking a
// request (sampled by tenant, rotated by size, written off the request
// path); the gateway and httpadmit.WithRequestLog call it. A Reader reads
// a log line by line in bounded memory and reports each malformed line
// with its number (RecordError); ParseRecord parses one line.
//
// For the replay itself open package shadow/replay; for the live rollout
// report and the decision log, package shadow.
package requestlog
