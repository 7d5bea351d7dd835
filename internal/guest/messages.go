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
// other. 1.1 adds ShutdownRequest and ShutdownAck; 1.2 adds Configure and
// ConfigureAck, and a Report's configured and job; 1.3 adds Session and
// SessionAck, after which the connection carries an exec and logs session.
const ProtocolVersion = "1.3"

// The first minor version of major 1 with each addition.
const (
	shutdownMinor  = 1
	configureMinor = 2
	sessionMinor   = 3
)

// Message is one of the protocol's messages: Hello, HelloAck,
// ReportRequest, Report, ShutdownRequest, ShutdownAck, Configure,
// ConfigureAck, SessionRequest, SessionAck or Error.
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
	// Configured is true once the guest's Workload took its Config; a
	// guest that restarted (its VM rebooted) says false again, and the host
	// configures it again. Since 1.2; absent from older guests.
	Configured bool `json:"configured,omitempty"`
	// Job is the guest's one job, once it was configured. Since 1.2.
	Job *JobReport `json:"job,omitempty"`
	// TEMP (zz_pending_fwd.go): the guest branch adds this field.
	AuthorizedKeysDigest string `json:"authorizedKeysDigest,omitempty"`
}

// JobPhase is where a guest's one job stands. The values are the
// MacOSInstance API's (status.runtime.job.phase), which the host copies.
type JobPhase string

// The job phases.
const (
	// JobWaiting: configured, asking the CI system for a job.
	JobWaiting JobPhase = "Waiting"
	// JobRunning: a job was taken and runs.
	JobRunning JobPhase = "Running"
	// JobSucceeded and JobFailed: the job ended, and the guest takes no other.
	JobSucceeded JobPhase = "Succeeded"
	JobFailed    JobPhase = "Failed"
)

// Known reports whether p is one of the job phases.
func (p JobPhase) Known() bool {
	switch p {
	case JobWaiting, JobRunning, JobSucceeded, JobFailed:
		return true
	}
	return false
}

// Ended reports whether p is a phase a job does not leave.
func (p JobPhase) Ended() bool { return p == JobSucceeded || p == JobFailed }

// JobReport is the guest's word on its one job. Since 1.2.
type JobReport struct {
	Phase JobPhase `json:"phase"`
	// ID is the CI system's job id, once a job was taken.
	ID int64 `json:"id,omitempty"`
	// StartedAt is when the guest took the job, by its clock.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the job ended, by its clock.
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	// QueuedSeconds is how long the job waited in the CI system's queue
	// before this guest took it, as the CI system says.
	QueuedSeconds *int64 `json:"queuedSeconds,omitempty"`
	// FailureReason is the CI system's reason for a failed job, such as
	// script_failure or runner_system_failure.
	FailureReason string `json:"failureReason,omitempty"`
	// ExitCode is the job script's exit code, when it ran to an end.
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// ShutdownRequest asks the guest to shut macOS down, host to guest: the
// gentlest way to stop a VM, before the framework's requestStop. Since 1.1.
type ShutdownRequest struct{}

// ShutdownAck says the guest began to shut down, guest to host; the
// connection then ends with the guest. Since 1.1.
type ShutdownAck struct{}

// Configure hands the guest its configuration, host to guest: the opened
// plaintext of the instance's sealed spec.guestConfig, a Config in JSON,
// forwarded as it is. It holds secrets (a CI runner's token), so it prints
// redacted. Since 1.2.
type Configure struct {
	Config json.RawMessage `json:"config"`
}

// ConfigureAck says the guest's Workload took the Config, guest to host.
// Since 1.2.
type ConfigureAck struct{}

// SessionRequest, the Session message (TypeSession), asks the guest to
// turn the connection into an exec and logs session, host to guest: after
// the guest's SessionAck, the same stream carries an SSH connection (the
// host its client, the guest its server) whose channels are the session's
// commands and log streams. (Session is the host's handle on one.) Since 1.3.
type SessionRequest struct {
	// User is the guest login user that commands run as, such as "admin".
	User string `json:"user"`
}

// SessionAck says the guest switched the connection to the session's SSH
// connection, guest to host: no frame follows, either way. Since 1.3.
type SessionAck struct{}

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
	// CodeConfigureFailed answers a Configure the guest did not take: an
	// invalid Config, a guest that runs no workloads, or one configured
	// with another Config already; the connection stays open.
	CodeConfigureFailed = "configure-failed"
	// CodeSessionFailed answers a Session the guest could not open (no
	// user, or no host key); the connection stays open, in frames.
	CodeSessionFailed = "session-failed"
)

// Error reports a failure to the peer, either way. After any code but
// CodeReportFailed, CodeShutdownFailed, CodeConfigureFailed and
// CodeSessionFailed the sender closes the connection.
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

// Type implements Message.
func (Configure) Type() MessageType { return TypeConfigure }

// Type implements Message.
func (ConfigureAck) Type() MessageType { return TypeConfigureAck }

// Type implements Message.
func (SessionRequest) Type() MessageType { return TypeSession }

// Type implements Message.
func (SessionAck) Type() MessageType { return TypeSessionAck }

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
	case TypeConfigure:
		m, err = unmarshal[Configure](f.Payload)
	case TypeConfigureAck:
		m, err = unmarshal[ConfigureAck](f.Payload)
	case TypeSession:
		m, err = unmarshal[SessionRequest](f.Payload)
	case TypeSessionAck:
		m, err = unmarshal[SessionAck](f.Payload)
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
func knowsShutdown(v string) bool { return atLeast(v, shutdownMinor) }

// KnowsConfigure reports whether a guest agent of protocol version v (its
// HelloAck's) understands a Configure: one older would close the
// connection on the unknown frame.
func KnowsConfigure(v string) bool { return atLeast(v, configureMinor) }

// KnowsSession reports whether a guest agent of protocol version v (its
// HelloAck's) can open an exec and logs session: one older would close the
// connection on the unknown frame.
func KnowsSession(v string) bool { return atLeast(v, sessionMinor) }

// atLeast reports whether v is 1.minor or later.
func atLeast(v string, minor int) bool {
	major, m, err := ParseVersion(v)
	return err == nil && (major > 1 || (major == 1 && m >= minor))
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
