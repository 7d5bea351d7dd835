package guest

import "errors"

// Sentinel errors. Callers match them with errors.Is. ReadFrame returns
// only these (or io.EOF before a frame starts, or the transport's own error).
var (
	// ErrBadMagic means a frame does not start with the "MRG" magic: the
	// peer does not speak this protocol at all.
	ErrBadMagic = errors.New("bad frame magic")
	// ErrUnsupportedVersion means a frame format version or a protocol
	// major version this side does not speak.
	ErrUnsupportedVersion = errors.New("unsupported version")
	// ErrUnknownType means a frame names a message type this side does not know.
	ErrUnknownType = errors.New("unknown message type")
	// ErrFrameTooLarge means a payload over MaxPayloadSize, refused before
	// it is read or allocated.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrTruncated means the stream ended inside a frame.
	ErrTruncated = errors.New("truncated frame")
	// ErrMalformed means a frame or payload that is not what the protocol
	// says: empty, not a JSON object, or not the message its type names.
	ErrMalformed = errors.New("malformed frame")
	// ErrUnexpectedMessage means a well-formed message out of turn, such as
	// a Report before the handshake.
	ErrUnexpectedMessage = errors.New("unexpected message")
	// ErrRemote means the peer answered with an Error message.
	ErrRemote = errors.New("peer reported an error")
	// ErrClosed means a Client that was closed, or closed itself after a
	// failure that left the stream in an unknown state.
	ErrClosed = errors.New("guest client closed")
	// ErrShutdownUnsupported means a guest agent of a protocol before 1.1,
	// which cannot be asked to shut down.
	ErrShutdownUnsupported = errors.New("guest agent cannot be asked to shut down")
	// ErrBadTransition means a boot stage change that goes backwards or
	// names no stage.
	ErrBadTransition = errors.New("bad boot stage transition")
)

// Sentinel errors of protocol 1.2's configuration.
var (
	// ErrConfigureUnsupported means a guest agent of a protocol before 1.2,
	// which cannot be configured.
	ErrConfigureUnsupported = errors.New("guest agent cannot be configured")
	// ErrInvalidConfig means a Config that does not decode or validate.
	ErrInvalidConfig = errors.New("invalid guest config")
	// ErrAlreadyConfigured means a Configure with another Config than the
	// one the guest took: one VM, one job.
	ErrAlreadyConfigured = errors.New("guest already configured")
	// ErrNoWorkload means a guest agent that runs no workloads.
	ErrNoWorkload = errors.New("this guest runs no workloads")
)

// Sentinel errors of protocol 1.3's exec and logs sessions.
var (
	// ErrSessionUnsupported means a guest agent of a protocol before 1.3,
	// which cannot open an exec and logs session.
	ErrSessionUnsupported = errors.New("guest agent cannot open exec and logs sessions")
	// ErrCommandNotFound means an exec whose argv[0] the guest found
	// neither as a path nor in the user's PATH: nothing ran.
	ErrCommandNotFound = errors.New("command not found")
	// ErrPortClosed means a port forward to a guest port nothing listens
	// on: the guest's connect to its loopback was refused.
	ErrPortClosed = errors.New("nothing listens on that guest port")
	// ErrInvalidAuthorizedKeys means authorized keys the guest refused as
	// such (one that does not parse, holds options or a newline): sending
	// them again fails again.
	ErrInvalidAuthorizedKeys = errors.New("invalid authorized keys")
)
