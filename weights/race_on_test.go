//go:build race

package weights

// raceEnabled reports whether the race detector is on; the slowest numeric
// tests (which exercise no concurrency) then check fewer texts.
const raceEnabled = true
