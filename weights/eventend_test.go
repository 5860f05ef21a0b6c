package weights

import (
	"bytes"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/eventstream"
)

// TestAtEventEnd: after each Read, AtEventEnd says whether the bytes
// returned so far end where an event ends, wherever the reads split the
// events: server-sent events passed on as read, server-sent events whose
// usage chunk is stripped (an event being read is held back, so the
// output always ends at an event's end), and an AWS event stream.
func TestAtEventEnd(t *testing.T) {
	ev1 := []byte(`data: {"choices":[{"delta":{"content":"Hello"}}]}` + "\n\n")
	ev2 := []byte(`data: {"choices":[{"delta":{"content":" there"}}]}` + "\n\n")
	fr1 := eventstream.Event("contentBlockDelta", []byte(`{"delta":{"text":"Hello"},"contentBlockIndex":0}`))
	fr2 := eventstream.Event("contentBlockDelta", []byte(`{"delta":{"text":" there"},"contentBlockIndex":0}`))
	for _, tc := range []struct {
		name   string
		cfg    StreamConfig
		chunks [][]byte
		want   []bool // after each Read that returned bytes
	}{
		{"sse", StreamConfig{},
			[][]byte{ev1[:10], ev1[10 : len(ev1)-1], ev1[len(ev1)-1:], append(bytes.Clone(ev2), ev1[:5]...), ev1[5:]},
			[]bool{false, false, true, false, true}},
		{"sse, a blank line split from its event", StreamConfig{},
			[][]byte{ev1[:len(ev1)-1], ev1[len(ev1)-1:]},
			[]bool{false, true}},
		{"sse, usage stripped", StreamConfig{StripUsage: true},
			[][]byte{ev1[:10], ev1[10:], append(bytes.Clone(ev2), ev1[:5]...), ev1[5:]},
			[]bool{true, true, true}},
		{"event stream", StreamConfig{EventStream: true},
			[][]byte{fr1[:7], fr1[7:20], fr1[20:], append(bytes.Clone(fr2), fr1[:3]...), fr1[3:]},
			[]bool{false, false, true, false, true}},
		{"event stream, corrupt", StreamConfig{EventStream: true},
			[][]byte{append(bytes.Repeat([]byte{0xff}, 12), fr1...)},
			[]bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStreamReader(&chunkReader{chunks: tc.chunks}, tc.cfg)
			buf := make([]byte, 4096)
			var got []bool
			for {
				n, err := s.Read(buf)
				if n > 0 {
					got = append(got, s.AtEventEnd())
				}
				if err != nil {
					break
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("AtEventEnd after each read: %v; want %v", got, tc.want)
			}
		})
	}
}
