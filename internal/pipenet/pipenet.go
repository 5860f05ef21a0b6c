// Package pipenet is a net.Listener whose connections are in-memory
// pipes (net.Pipe), for tests that serve HTTP inside a testing/synctest
// bubble: a pipe's deadlines run on the bubble's clock, which real
// sockets' do not, and a write the other end does not read blocks at
// once, as one to a client that stopped reading does once the socket
// buffers are full.
package pipenet

import (
	"net"
	"sync"
)

// Listener is a net.Listener of in-memory connections; Dial makes them.
// It is safe for concurrent use.
type Listener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// Listen returns a listener with no connection yet.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Dial returns the client end of a new connection, once Accept has
// returned its server end; after Close it returns net.ErrClosed.
func (l *Listener) Dial() (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	}
}

// Accept returns the server end of the next connection Dial makes.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial; the connections made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns a loopback address, the listener's in name only.
func (l *Listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }
