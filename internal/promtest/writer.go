package promtest

import (
	"io"
	"sync"
)

// lockedWriter collects a process's output safely while tests read it.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.w.(interface{ String() string }); ok {
		return s.String()
	}
	return ""
}
