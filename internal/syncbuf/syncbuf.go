// Package syncbuf is a buffer that goroutines may write to while a test
// reads it: the output of a server or a child process under test.
package syncbuf

import (
	"bytes"
	"sync"
)

// A Buffer is a bytes.Buffer safe for concurrent Write and String. The
// zero value is an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
