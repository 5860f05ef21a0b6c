// Package status is the operator's live view of a controller: a Page,
// served on the operator listener at /status (HTML) and /status.json,
// shows every policy with its mode, algorithm, limit and current use, its
// refusals over the last window (a shadow.Recorder's Figures) and their
// tenants, the top agent sessions by spend and the sessions refused as
// loops (how often, and the step they repeated), the shadow policies'
// would-reject ratio against the rollout threshold, queue waits, store
// health and the last configuration reloads.
//
// The Page is an admission.Observer too: join it with the others
// (shadow.Join). For what a replay of the traffic through other limits
// would show, open package shadow/replay.
//
// Optional collaborators are options: WithRecorder, WithClock; see
// docs/concepts.md#constructors.
package status
