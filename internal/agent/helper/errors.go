package helper

import (
	"errors"
	"fmt"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
)

// Sentinel errors. Callers match them with errors.Is; those the helper
// answers with cross the socket as a RemoteError that unwraps to them.
var (
	// ErrBadRequest means the helper could not make sense of a request.
	ErrBadRequest = errors.New("bad helper request")
	// ErrUnsupportedVersion means the two ends speak different protocol versions.
	ErrUnsupportedVersion = errors.New("unsupported helper protocol version")
	// ErrSpecMismatch means a spec differs from the one the helper runs.
	ErrSpecMismatch = errors.New("spec differs from the helper's")
	// ErrClientClosed means the client was closed.
	ErrClientClosed = errors.New("helper client closed")
	// ErrInvalidUID means an instance UID cannot name a helper's files.
	ErrInvalidUID = errors.New("invalid instance UID")
	// ErrSocketPathTooLong means the socket path exceeds what sockaddr_un holds.
	ErrSocketPathTooLong = errors.New("socket path too long")
	// ErrSocketInUse means a live helper already serves the socket.
	ErrSocketInUse = errors.New("socket in use")
	// ErrHelperExited means a helper process exited before it served.
	ErrHelperExited = errors.New("helper exited before it was ready")
	// ErrHelperBusy means an instance's helper process is alive and holds its
	// socket but did not answer in time; a second helper is not launched
	// beside it, as it would run the same VM twice. Retry later.
	ErrHelperBusy = errors.New("helper alive but not answering")
	// ErrUnknownInstance means no helper runs for the instance.
	ErrUnknownInstance = errors.New("no helper for the instance")
)

// DomainHelper is the error domain of the helper's own errors on the wire;
// Virtualization.framework's keep driver.DomainVZ.
const DomainHelper = "MacRackHelper"

// Codes of DomainHelper.
const (
	CodeInternal           = 0
	CodeBadRequest         = 1
	CodeUnsupportedVersion = 2
	CodeSpecMismatch       = 3
	CodeNotRunning         = 4
	CodeNoVsock            = 5
)

// codeSentinels maps each DomainHelper code to the sentinel it stands for.
var codeSentinels = []struct {
	code int
	err  error
}{
	{CodeBadRequest, ErrBadRequest},
	{CodeUnsupportedVersion, ErrUnsupportedVersion},
	{CodeSpecMismatch, ErrSpecMismatch},
	{CodeNotRunning, driver.ErrNotRunning},
	{CodeNoVsock, driver.ErrNoVsock},
}

// RemoteError is an error the helper answered with, other than a VZError.
type RemoteError struct {
	Code    int
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("helper: %s", e.Message)
}

// Unwrap returns the sentinel the code stands for, if any.
func (e *RemoteError) Unwrap() error {
	for _, s := range codeSentinels {
		if s.code == e.Code {
			return s.err
		}
	}
	return nil
}

// toWire encodes err for a response.
func toWire(err error) *wireError {
	var vz *driver.VZError
	if errors.As(err, &vz) {
		return &wireError{Domain: vz.Domain, Code: vz.Code, Message: vz.Message}
	}
	code := CodeInternal
	for _, s := range codeSentinels {
		if errors.Is(err, s.err) {
			code = s.code
			break
		}
	}
	return &wireError{Domain: DomainHelper, Code: code, Message: err.Error()}
}

// fromWire decodes a response's error: a VZ error as *driver.VZError, so
// that driver.IsLimitExceeded works on the agent's side.
func fromWire(w *wireError) error {
	if w.Domain == DomainHelper {
		return &RemoteError{Code: w.Code, Message: w.Message}
	}
	return &driver.VZError{Domain: w.Domain, Code: w.Code, Message: w.Message}
}
