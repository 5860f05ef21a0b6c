// Package eventstream reads and writes the AWS event-stream framing
// (content type application/vnd.amazon.eventstream), which Amazon
// Bedrock's ConverseStream answers in: each message is a prelude (its
// total length, its headers' length, both big-endian uint32, and the
// CRC-32 of those eight bytes), its headers, its payload, and the CRC-32
// of everything before it.
//
// A Decoder is fed a stream in pieces of any size and returns each
// message once it holds it whole; it holds at most one message, of at
// most its bound, and refuses a larger one, or one whose checksums do
// not match, without reading it. The package imports the standard
// library only.
package eventstream

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Sizes of the framing.
const (
	// preludeLen is the prelude: total length, headers length, prelude
	// CRC.
	preludeLen = 12
	// MinMessage is the smallest message: a prelude and a message CRC.
	MinMessage = preludeLen + 4
	// MaxMessage is the largest message AWS sends (16 MiB); a
	// Decoder's bound is at most this.
	MaxMessage = 16 << 20
	// maxHeaders is the most header bytes AWS puts in a message.
	maxHeaders = 128 << 10
)

// The value types of a header.
const (
	typeTrue      = 0
	typeFalse     = 1
	typeByte      = 2
	typeInt16     = 3
	typeInt32     = 4
	typeInt64     = 5
	typeBytes     = 6
	typeString    = 7
	typeTimestamp = 8
	typeUUID      = 9
)

// Errors of a Decoder. After one, the stream cannot be read further: the
// framing gives no way to find the next message.
var (
	// ErrTooLarge: the message is over the Decoder's bound, or its
	// headers over 128 KiB.
	ErrTooLarge = errors.New("eventstream: message over the size bound")
	// ErrChecksum: a CRC-32 does not match.
	ErrChecksum = errors.New("eventstream: checksum mismatch")
	// ErrMalformed: the lengths or the headers do not fit together.
	ErrMalformed = errors.New("eventstream: malformed message")
)

// Header is one string header of a message. Headers of other types are
// checked but not returned: the messages Bedrock sends name their type
// and event in string headers only.
type Header struct {
	Name, Value string
}

// Message is a decoded message: its string headers and its payload, both
// views into the Decoder's buffer, valid until the next call to Next.
type Message struct {
	Headers []Header
	Payload []byte
}

// Get returns the value of the string header name, or "".
func (m *Message) Get(name string) string {
	for _, h := range m.Headers {
		if h.Name == name {
			return h.Value
		}
	}
	return ""
}

// Decoder reads messages from a stream fed to it in pieces.
type Decoder struct {
	max  int
	buf  []byte
	pos  int // start of the unread bytes in buf
	err  error
	msg  Message
	hdrs [8]Header
}

// NewDecoder returns a Decoder refusing messages over max bytes (at most
// MaxMessage; zero or less means MaxMessage).
func NewDecoder(max int) *Decoder {
	if max <= 0 || max > MaxMessage {
		max = MaxMessage
	}
	return &Decoder{max: max}
}

// Feed hands the Decoder the next bytes of the stream; it keeps a copy
// of those it has not returned as messages yet.
func (d *Decoder) Feed(b []byte) {
	if d.err != nil || len(b) == 0 {
		return
	}
	if d.pos > 0 {
		n := copy(d.buf, d.buf[d.pos:])
		d.buf, d.pos = d.buf[:n], 0
	}
	d.buf = append(d.buf, b...)
}

// Next returns the next whole message, or ok false when the bytes fed so
// far hold none (or after an error, see Err). A message's prelude is
// checked as soon as its twelve bytes arrive, so an oversized or corrupt
// message is refused before it is buffered.
func (d *Decoder) Next() (m *Message, ok bool) {
	if d.err != nil {
		return nil, false
	}
	rest := d.buf[d.pos:]
	if len(rest) < preludeLen {
		return nil, false
	}
	total, hlen, err := checkPrelude(rest, d.max)
	if err != nil {
		d.fail(err)
		return nil, false
	}
	if len(rest) < total {
		return nil, false
	}
	frame := rest[:total]
	if crc32.ChecksumIEEE(frame[:total-4]) != binary.BigEndian.Uint32(frame[total-4:]) {
		d.fail(ErrChecksum)
		return nil, false
	}
	d.msg.Headers = d.hdrs[:0]
	if d.msg.Headers, err = parseHeaders(d.msg.Headers, frame[preludeLen:preludeLen+hlen]); err != nil {
		d.fail(err)
		return nil, false
	}
	d.msg.Payload = frame[preludeLen+hlen : total-4]
	d.pos += total
	return &d.msg, true
}

// Err returns the error that stopped the Decoder, or nil.
func (d *Decoder) Err() error { return d.err }

// Pending returns the number of bytes held that belong to no message
// returned yet: a stream that ends with some ended within a message.
func (d *Decoder) Pending() int { return len(d.buf) - d.pos }

func (d *Decoder) fail(err error) {
	d.err, d.buf, d.pos = err, nil, 0
}

// checkPrelude checks the prelude at the start of b and returns the
// message's total length and its headers' length.
func checkPrelude(b []byte, max int) (total, hlen int, err error) {
	t, h := binary.BigEndian.Uint32(b[0:4]), binary.BigEndian.Uint32(b[4:8])
	if crc32.ChecksumIEEE(b[:8]) != binary.BigEndian.Uint32(b[8:12]) {
		return 0, 0, ErrChecksum
	}
	if uint64(t) > uint64(max) || h > maxHeaders {
		return 0, 0, ErrTooLarge
	}
	if t < MinMessage || uint64(h) > uint64(t)-MinMessage {
		return 0, 0, ErrMalformed
	}
	return int(t), int(h), nil
}

// parseHeaders appends the string headers of b to hs, checking the others.
func parseHeaders(hs []Header, b []byte) ([]Header, error) {
	for len(b) > 0 {
		n := int(b[0])
		if n == 0 || len(b) < 2+n {
			return hs, ErrMalformed
		}
		name := string(b[1 : 1+n])
		typ := b[1+n]
		b = b[2+n:]
		var size int
		switch typ {
		case typeTrue, typeFalse:
		case typeByte:
			size = 1
		case typeInt16:
			size = 2
		case typeInt32:
			size = 4
		case typeInt64, typeTimestamp:
			size = 8
		case typeUUID:
			size = 16
		case typeBytes, typeString:
			if len(b) < 2 {
				return hs, ErrMalformed
			}
			size = int(binary.BigEndian.Uint16(b))
			b = b[2:]
		default:
			return hs, ErrMalformed
		}
		if len(b) < size {
			return hs, ErrMalformed
		}
		if typ == typeString {
			hs = append(hs, Header{Name: name, Value: string(b[:size])})
		}
		b = b[size:]
	}
	return hs, nil
}

// Append appends to dst the message with the string headers hs and
// payload. Names are at most 255 bytes and values at most 65,535: a
// longer one is cut to its bound.
func Append(dst []byte, hs []Header, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, preludeLen)...)
	for _, h := range hs {
		name, value := h.Name[:min(len(h.Name), 255)], h.Value[:min(len(h.Value), 0xffff)]
		dst = append(dst, byte(len(name)))
		dst = append(dst, name...)
		dst = append(dst, typeString)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(value)))
		dst = append(dst, value...)
	}
	hlen := len(dst) - start - preludeLen
	dst = append(dst, payload...)
	total := len(dst) - start + 4
	binary.BigEndian.PutUint32(dst[start:], uint32(total))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(hlen))
	binary.BigEndian.PutUint32(dst[start+8:], crc32.ChecksumIEEE(dst[start:start+8]))
	return binary.BigEndian.AppendUint32(dst, crc32.ChecksumIEEE(dst[start:]))
}

// Event returns an event message as Bedrock sends one: :event-type
// event, :content-type application/json, :message-type event, and the
// JSON payload.
func Event(event string, payload []byte) []byte {
	return Append(nil, []Header{{":event-type", event}, {":content-type", "application/json"}, {":message-type", "event"}}, payload)
}

// Exception returns an exception message as Bedrock ends a stream with
// one: :exception-type typ (throttlingException,
// serviceUnavailableException...), :content-type application/json,
// :message-type exception, and the JSON payload {"message": ...}.
func Exception(typ string, payload []byte) []byte {
	return Append(nil, []Header{{":exception-type", typ}, {":content-type", "application/json"}, {":message-type", "exception"}}, payload)
}
