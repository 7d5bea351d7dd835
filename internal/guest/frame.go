package guest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

const (
	// FrameVersion is the header layout this package reads and writes.
	FrameVersion byte = 1
	// HeaderSize is the fixed size of a frame header.
	HeaderSize = 9
	// MaxPayloadSize bounds a payload. A Report is well under 4 KiB, and a
	// Configure carries at most the 16 KiB a seal holds; the bound keeps a
	// broken or hostile peer from making us allocate.
	MaxPayloadSize = 64 << 10
)

// magic starts every frame.
const magic = "MRG"

// MessageType names the message a frame carries.
type MessageType byte

// The message types. Zero is never valid, so a zeroed header is refused.
const (
	TypeHello         MessageType = 1
	TypeHelloAck      MessageType = 2
	TypeReportRequest MessageType = 3
	TypeReport        MessageType = 4
	TypeError         MessageType = 5
	// Since protocol 1.1.
	TypeShutdownRequest MessageType = 6
	TypeShutdownAck     MessageType = 7
	// Since protocol 1.2.
	TypeConfigure    MessageType = 8
	TypeConfigureAck MessageType = 9
	// Since protocol 1.3.
	TypeSession    MessageType = 10
	TypeSessionAck MessageType = 11
)

// String names t for logs and errors.
func (t MessageType) String() string {
	switch t {
	case TypeHello:
		return "Hello"
	case TypeHelloAck:
		return "HelloAck"
	case TypeReportRequest:
		return "ReportRequest"
	case TypeReport:
		return "Report"
	case TypeError:
		return "Error"
	case TypeShutdownRequest:
		return "ShutdownRequest"
	case TypeShutdownAck:
		return "ShutdownAck"
	case TypeConfigure:
		return "Configure"
	case TypeConfigureAck:
		return "ConfigureAck"
	case TypeSession:
		return "Session"
	case TypeSessionAck:
		return "SessionAck"
	}
	return fmt.Sprintf("MessageType(%d)", byte(t))
}

// known reports whether t is a message type of this protocol.
func (t MessageType) known() bool {
	return t >= TypeHello && t <= TypeSessionAck
}

// Frame is one decoded frame: a known type and a payload that is a JSON
// object of at most MaxPayloadSize bytes.
type Frame struct {
	Type    MessageType
	Payload []byte
}

// ReadFrame reads exactly one frame from r. It checks the whole header
// before reading or allocating the payload, so an oversized length costs
// nothing. It returns io.EOF if r ends before the first byte of a frame,
// an error wrapping one of the frame sentinels (ErrBadMagic,
// ErrUnsupportedVersion, ErrUnknownType, ErrFrameTooLarge, ErrTruncated,
// ErrMalformed) for a bad frame, or r's own error (a deadline, a reset).
func ReadFrame(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if n, err := io.ReadFull(r, h[:]); err != nil {
		switch {
		case n == 0 && errors.Is(err, io.EOF):
			return Frame{}, io.EOF
		case errors.Is(err, io.ErrUnexpectedEOF):
			return Frame{}, fmt.Errorf("%w: header ends after %d of %d bytes", ErrTruncated, n, HeaderSize)
		}
		return Frame{}, fmt.Errorf("reading frame header: %w", err)
	}
	if string(h[0:3]) != magic {
		return Frame{}, fmt.Errorf("%w: got %q, want %q", ErrBadMagic, h[0:3], magic)
	}
	if h[3] != FrameVersion {
		return Frame{}, fmt.Errorf("%w: frame format version %d, want %d", ErrUnsupportedVersion, h[3], FrameVersion)
	}
	t := MessageType(h[4])
	if !t.known() {
		return Frame{}, fmt.Errorf("%w: %d", ErrUnknownType, h[4])
	}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > MaxPayloadSize {
		return Frame{}, fmt.Errorf("%w: %s payload of %d bytes, limit %d", ErrFrameTooLarge, t, n, MaxPayloadSize)
	}
	if n == 0 {
		return Frame{}, fmt.Errorf("%w: empty %s payload", ErrMalformed, t)
	}
	payload := make([]byte, n)
	if got, err := io.ReadFull(r, payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: %s payload ends after %d of %d bytes", ErrTruncated, t, got, n)
		}
		return Frame{}, fmt.Errorf("reading %s payload: %w", t, err)
	}
	if err := checkObject(payload); err != nil {
		return Frame{}, fmt.Errorf("%w: %s payload: %w", ErrMalformed, t, err)
	}
	return Frame{Type: t, Payload: payload}, nil
}

// WriteFrame writes f as one frame, in a single Write so that concurrent
// writers on a stream never interleave headers and payloads. It refuses a
// frame ReadFrame would refuse.
func WriteFrame(w io.Writer, f Frame) error {
	if !f.Type.known() {
		return fmt.Errorf("%w: %d", ErrUnknownType, byte(f.Type))
	}
	if len(f.Payload) > MaxPayloadSize {
		return fmt.Errorf("%w: %s payload of %d bytes, limit %d", ErrFrameTooLarge, f.Type, len(f.Payload), MaxPayloadSize)
	}
	if err := checkObject(f.Payload); err != nil {
		return fmt.Errorf("%w: %s payload: %w", ErrMalformed, f.Type, err)
	}
	buf := make([]byte, HeaderSize+len(f.Payload))
	copy(buf, magic)
	buf[3] = FrameVersion
	buf[4] = byte(f.Type)
	binary.BigEndian.PutUint32(buf[5:9], uint32(len(f.Payload)))
	copy(buf[HeaderSize:], f.Payload)
	if f.Type == TypeConfigure {
		// Its payload holds secrets: leave no copy of them about.
		defer clear(buf)
	}
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("writing %s frame: %w", f.Type, err)
	}
	return nil
}

// checkObject accepts exactly one JSON object, so that every message can
// grow fields in a later minor version without breaking older peers.
func checkObject(p []byte) error {
	if len(p) == 0 {
		return errors.New("empty")
	}
	if !json.Valid(p) {
		return errors.New("invalid JSON")
	}
	if b := bytes.TrimLeft(p, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		return errors.New("not a JSON object")
	}
	return nil
}
