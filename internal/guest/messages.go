package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ProtocolVersion is the "major.minor" version this package speaks. A minor
// bump only adds optional fields or requests an older peer need not know;
// a major bump changes meaning, and peers of different majors refuse each
// other. 1.1 adds ShutdownRequest and ShutdownAck.
const ProtocolVersion = "1.1"

// shutdownMinor is the first minor version of major 1 with ShutdownRequest.
const shutdownMinor = 1

// Message is one of the protocol's messages: Hello, HelloAck,
// ReportRequest, Report, ShutdownRequest, ShutdownAck or Error.
type Message interface {
	// Type is the frame type that carries the message.
	Type() MessageType
}

// Hello opens a connection, host to guest.
type Hello struct {
	ProtocolVersion string `json:"protocolVersion"`
}

// HelloAck accepts a Hello, guest to host.
type HelloAck struct {
	ProtocolVersion string `json:"protocolVersion"`
	AgentVersion    string `json:"agentVersion"`
}

// ReportRequest asks the guest for a Report, host to guest.
type ReportRequest struct{}

// Report is what the guest knows about itself, guest to host. The host
// copies it into the MacOSInstance's status.runtime.
type Report struct {
	// BootStage is the guest agent's BootStage.
	BootStage string `json:"bootStage"`
	// XcodeVersions are the installed Xcodes' versions, sorted, without duplicates.
	XcodeVersions []string `json:"xcodeVersions"`
	// DiskHeadroomBytes is the space left to unprivileged writers on the
	// guest's data volume.
	DiskHeadroomBytes int64 `json:"diskHeadroomBytes"`
	// ReadyForWork is true when the guest can take a job: booted, an Xcode
	// installed, and enough disk headroom.
	ReadyForWork bool `json:"readyForWork"`
	// Time is when the guest took the report, by its own clock.
	Time time.Time `json:"time"`
}

// ShutdownRequest asks the guest to shut macOS down, host to guest: the
// gentlest way to stop a VM, before the framework's requestStop. Since 1.1.
type ShutdownRequest struct{}

// ShutdownAck says the guest began to shut down, guest to host; the
// connection then ends with the guest. Since 1.1.
type ShutdownAck struct{}

// Error codes: why a peer sent an Error.
const (
	// CodeMalformed answers a frame that could not be decoded.
	CodeMalformed = "malformed"
	// CodeUnsupportedVersion answers a Hello of another protocol major.
	CodeUnsupportedVersion = "unsupported-version"
	// CodeUnexpectedMessage answers a message out of turn.
	CodeUnexpectedMessage = "unexpected-message"
	// CodeReportFailed answers a ReportRequest the Reporter failed; the
	// connection stays open, since asking again may work.
	CodeReportFailed = "report-failed"
	// CodeShutdownFailed answers a ShutdownRequest the guest could not act
	// on (it has no way to shut down, or the command failed); the
	// connection stays open.
	CodeShutdownFailed = "shutdown-failed"
)

// Error reports a failure to the peer, either way. After any code but
// CodeReportFailed and CodeShutdownFailed the sender closes the connection.
type Error struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
}

// Type implements Message.
func (Hello) Type() MessageType { return TypeHello }

// Type implements Message.
func (HelloAck) Type() MessageType { return TypeHelloAck }

// Type implements Message.
func (ReportRequest) Type() MessageType { return TypeReportRequest }

// Type implements Message.
func (Report) Type() MessageType { return TypeReport }

// Type implements Message.
func (Error) Type() MessageType { return TypeError }

// Type implements Message.
func (ShutdownRequest) Type() MessageType { return TypeShutdownRequest }

// Type implements Message.
func (ShutdownAck) Type() MessageType { return TypeShutdownAck }

// Encode marshals m into a frame, refusing one over MaxPayloadSize.
func Encode(m Message) (Frame, error) {
	if m == nil {
		return Frame{}, fmt.Errorf("%w: nil message", ErrMalformed)
	}
	p, err := json.Marshal(m)
	if err != nil {
		return Frame{}, fmt.Errorf("encoding %s: %w", m.Type(), err)
	}
	if len(p) > MaxPayloadSize {
		return Frame{}, fmt.Errorf("%w: %s payload of %d bytes, limit %d", ErrFrameTooLarge, m.Type(), len(p), MaxPayloadSize)
	}
	return Frame{Type: m.Type(), Payload: p}, nil
}

// Decode unmarshals f's payload into the message its type names, returned
// by value (Hello, not *Hello). Unknown fields are ignored, for minor
// versions that add some.
func (f Frame) Decode() (Message, error) {
	var (
		m   Message
		err error
	)
	switch f.Type {
	case TypeHello:
		m, err = unmarshal[Hello](f.Payload)
	case TypeHelloAck:
		m, err = unmarshal[HelloAck](f.Payload)
	case TypeReportRequest:
		m, err = unmarshal[ReportRequest](f.Payload)
	case TypeReport:
		m, err = unmarshal[Report](f.Payload)
	case TypeError:
		m, err = unmarshal[Error](f.Payload)
	case TypeShutdownRequest:
		m, err = unmarshal[ShutdownRequest](f.Payload)
	case TypeShutdownAck:
		m, err = unmarshal[ShutdownAck](f.Payload)
	default:
		return nil, fmt.Errorf("%w: %d", ErrUnknownType, byte(f.Type))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s payload: %w", ErrMalformed, f.Type, err)
	}
	return m, nil
}

func unmarshal[M Message](p []byte) (Message, error) {
	var m M
	if err := json.Unmarshal(p, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// WriteMessage encodes m and writes it as one frame.
func WriteMessage(w io.Writer, m Message) error {
	f, err := Encode(m)
	if err != nil {
		return err
	}
	return WriteFrame(w, f)
}

// ReadMessage reads one frame and decodes it.
func ReadMessage(r io.Reader) (Message, error) {
	f, err := ReadFrame(r)
	if err != nil {
		return nil, err
	}
	return f.Decode()
}

// ParseVersion splits a "major.minor" protocol version. It wraps
// ErrMalformed for anything else.
func ParseVersion(v string) (major, minor int, err error) {
	a, b, ok := strings.Cut(v, ".")
	if ok {
		major, err = strconv.Atoi(a)
		if err == nil {
			minor, err = strconv.Atoi(b)
		}
	}
	if !ok || err != nil || major < 0 || minor < 0 {
		return 0, 0, fmt.Errorf("%w: protocol version %q is not major.minor", ErrMalformed, v)
	}
	return major, minor, nil
}

// knowsShutdown reports whether a peer of version v understands a
// ShutdownRequest.
func knowsShutdown(v string) bool {
	major, minor, err := ParseVersion(v)
	return err == nil && (major > 1 || (major == 1 && minor >= shutdownMinor))
}

// compatible checks that peer speaks the same protocol major as we do,
// wrapping ErrUnsupportedVersion if not.
func compatible(ours, peer string) error {
	om, _, err := ParseVersion(ours)
	if err != nil {
		return err
	}
	pm, _, err := ParseVersion(peer)
	if err != nil {
		return err
	}
	if om != pm {
		return fmt.Errorf("%w: peer speaks protocol %s, this side speaks %s (major %d only)", ErrUnsupportedVersion, peer, ours, om)
	}
	return nil
}
