package eventstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	awsstream "github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// A message Append writes is read by the AWS SDK's own decoder with the
// same headers and payload.
func TestAppendReadByAWS(t *testing.T) {
	payload := []byte(`{"contentBlockIndex":0,"delta":{"text":"Hello"}}`)
	b := Event("contentBlockDelta", payload)
	m, err := awsstream.NewDecoder().Decode(bytes.NewReader(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Payload, payload) {
		t.Errorf("payload %q; want %q", m.Payload, payload)
	}
	for name, want := range map[string]string{":event-type": "contentBlockDelta", ":content-type": "application/json", ":message-type": "event"} {
		if got := m.Headers.Get(name); got == nil || got.String() != want {
			t.Errorf("header %s = %v; want %q", name, got, want)
		}
	}
}

// The AWS SDK's encoder's messages, with headers of every type, are read
// whole whatever the pieces they are fed in: each string header and the
// payload as written.
func TestDecoderReadsAWS(t *testing.T) {
	var stream bytes.Buffer
	enc := awsstream.NewEncoder()
	var want []string
	for i, p := range []string{`{"role":"assistant"}`, "", `{"usage":{"inputTokens":3}}`} {
		hs := awsstream.Headers{}
		hs.Set(":event-type", awsstream.StringValue("e"+string(rune('0'+i))))
		hs.Set("flag", awsstream.BoolValue(i%2 == 0))
		hs.Set("n8", awsstream.Int8Value(1))
		hs.Set("n16", awsstream.Int16Value(2))
		hs.Set("n32", awsstream.Int32Value(3))
		hs.Set("n64", awsstream.Int64Value(4))
		hs.Set("raw", awsstream.BytesValue("xyz"))
		hs.Set("at", awsstream.TimestampValue(time.Unix(1700000000, 0)))
		hs.Set("id", awsstream.UUIDValue{1, 2, 3})
		if err := enc.Encode(&stream, awsstream.Message{Headers: hs, Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
		want = append(want, "e"+string(rune('0'+i))+"|"+p)
	}
	for _, piece := range []int{1, 7, 64, stream.Len()} {
		d := NewDecoder(1 << 10)
		var got []string
		b := stream.Bytes()
		for i := 0; i < len(b); i += piece {
			d.Feed(b[i:min(i+piece, len(b))])
			for m, ok := d.Next(); ok; m, ok = d.Next() {
				got = append(got, m.Get(":event-type")+"|"+string(m.Payload))
				if len(m.Headers) != 1 {
					t.Errorf("pieces of %d: headers %v; want the one string header", piece, m.Headers)
				}
			}
		}
		if d.Err() != nil || d.Pending() != 0 || len(got) != len(want) {
			t.Fatalf("pieces of %d: %q, err %v, %d pending; want %q", piece, got, d.Err(), d.Pending(), want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("pieces of %d: message %d = %q; want %q", piece, i, got[i], want[i])
			}
		}
	}
}

// prelude returns a prelude claiming total and headers bytes, its CRC
// right.
func prelude(total, headers uint32) []byte {
	b := binary.BigEndian.AppendUint32(nil, total)
	b = binary.BigEndian.AppendUint32(b, headers)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// Every malformed message is refused, a message over the bound as soon as
// its prelude is read (before its bytes are held), and the Decoder reads
// nothing after.
func TestDecoderRefuses(t *testing.T) {
	good := Event("messageStop", []byte(`{}`))
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 1
		return b
	}
	badHeader := Append(nil, []Header{{":event-type", "x"}}, nil)
	badHeader[preludeLen+1+len(":event-type")] = 42 // no such type
	badHeader = fixCRC(badHeader)
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"over the bound", prelude(1<<20, 0), ErrTooLarge},
		{"headers over 128 KiB", prelude(200<<10, 129<<10), ErrTooLarge},
		{"prelude checksum", flip(9), ErrChecksum},
		{"length changed", flip(3), ErrChecksum},
		{"payload changed", flip(len(good) - 6), ErrChecksum},
		{"message checksum", flip(len(good) - 1), ErrChecksum},
		{"shorter than a message", prelude(15, 0), ErrMalformed},
		{"headers beyond the message", prelude(20, 8), ErrMalformed},
		{"unknown header type", badHeader, ErrMalformed},
		{"header cut", fixCRC(append(prelude(16+3, 3), 5, 'a', 'b', 0, 0, 0, 0)), ErrMalformed},
	} {
		d := NewDecoder(64 << 10)
		d.Feed(tc.in)
		if _, ok := d.Next(); ok || !errors.Is(d.Err(), tc.want) {
			t.Errorf("%s: Next ok %v, Err %v; want %v", tc.name, ok, d.Err(), tc.want)
		}
		d.Feed(good)
		if _, ok := d.Next(); ok || d.Pending() != 0 {
			t.Errorf("%s: read on after the error (%d bytes held)", tc.name, d.Pending())
		}
	}
}

// fixCRC sets the message CRC of b, whose prelude is right, to match.
func fixCRC(b []byte) []byte {
	n := len(b) - 4
	binary.BigEndian.PutUint32(b[n:], crc32.ChecksumIEEE(b[:n]))
	return b
}

// FuzzDecoder: whatever the bytes, the Decoder never panics, holds at
// most its bound and the piece being fed, and reads the same messages
// and the same error whether the bytes come at once or one by one.
func FuzzDecoder(f *testing.F) {
	f.Add(append(Event("contentBlockDelta", []byte(`{"delta":{"text":"hi"}}`)), Exception("throttlingException", []byte(`{"message":"slow"}`))...))
	f.Add(prelude(1<<30, 0))
	f.Add(prelude(16, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		const bound = 1 << 10
		whole := NewDecoder(bound)
		whole.Feed(b)
		var a []string
		for m, ok := whole.Next(); ok; m, ok = whole.Next() {
			a = append(a, string(m.Payload)+"|"+m.Get(":event-type"))
		}
		bytewise := NewDecoder(bound)
		var c []string
		for i := range b {
			bytewise.Feed(b[i : i+1])
			if bytewise.Pending() > bound {
				t.Fatalf("%d bytes held; the bound is %d", bytewise.Pending(), bound)
			}
			for m, ok := bytewise.Next(); ok; m, ok = bytewise.Next() {
				c = append(c, string(m.Payload)+"|"+m.Get(":event-type"))
			}
		}
		if !errors.Is(whole.Err(), bytewise.Err()) || len(a) != len(c) {
			t.Fatalf("at once: %q, %v; byte by byte: %q, %v", a, whole.Err(), c, bytewise.Err())
		}
		for i := range a {
			if a[i] != c[i] {
				t.Fatalf("message %d: %q at once, %q byte by byte", i, a[i], c[i])
			}
		}
		// The bytes as the headers of a message whose checksums match:
		// the header parser sees them; what it returns is within them.
		if len(b) <= bound-MinMessage {
			framed := fixCRC(append(prelude(uint32(MinMessage+len(b)), uint32(len(b))), append(bytes.Clone(b), 0, 0, 0, 0)...))
			d := NewDecoder(bound)
			d.Feed(framed)
			if m, ok := d.Next(); ok {
				n := 0
				for _, h := range m.Headers {
					n += 4 + len(h.Name) + len(h.Value)
				}
				if n > len(b) || len(m.Payload) != 0 {
					t.Fatalf("headers %q and payload %q from %d header bytes", m.Headers, m.Payload, len(b))
				}
			} else if !errors.Is(d.Err(), ErrMalformed) {
				t.Fatalf("refused with %v; want ErrMalformed", d.Err())
			}
		}
	})
}
