// Package replay is the what-if engine: it replays a request log (package
// shadow/requestlog) through one or more candidate configurations on a
// virtual clock and reports, per candidate and policy, what each would
// admit, reject and would reject, queues simulated (Run, Replayer).
//
// Each policy's figures are a shadow.Figures, the form of the live
// rollout report and the status page too, with the replay's own counts
// around it (Policy). Report.WriteText prints the comparison table that
// admitctl replay shows, Report.WriteHTML draws it as a self-contained
// page, and Suggest finds the smallest limits under which each policy
// rejects at most a target share of the log.
//
// For the log's format and writing it from live traffic open package
// shadow/requestlog; for the live figures, packages shadow and
// shadow/status.
package replay
