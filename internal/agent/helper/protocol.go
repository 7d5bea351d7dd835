// Package helper runs each VM in its own vm-helper process, because a
// Virtualization.framework VM lives and dies with the process that created
// it: the host agent can then restart without taking the VMs down, and
// reattaches to the helpers it finds.
//
// The agent talks to a helper over a Unix socket, in JSON lines. Each
// request is one line:
//
//	{"v":1,"op":"hello"}
//	{"v":1,"op":"start","spec":{...vmspec.VMSpec...}}
//	{"v":1,"op":"stop","gracefulMillis":30000}
//	{"v":1,"op":"state"}
//	{"v":1,"op":"dialGuest","port":1024}
//
// and each response is one line:
//
//	{"v":1,"ok":true,"state":"Running","hello":{"instanceUID":"...","vmName":"ns/name","pid":42}}
//	{"v":1,"ok":false,"state":"Stopped","error":{"domain":"VZErrorDomain","code":6,"message":"..."}}
//	{"v":1,"ok":true,"state":"Stopped","stop":"RequestStop"}
//
// The answer to stop says, in "stop", how the VM went down: GuestShutdown,
// RequestStop (the guest honoured the framework's request within the
// grace period) or Forced; it is absent when the VM never ran. An older
// helper leaves it out, which the agent reads as unknown.
//
// A connection carries any number of request/response pairs, in order.
// After the OK response to dialGuest, the connection is a raw byte stream
// to the guest's vsock port. A request of another version than Version is
// answered with a DomainHelper CodeUnsupportedVersion error and the
// connection is closed; so is a line that is not JSON.
package helper

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// Version is the protocol version this package speaks.
const Version = 1

// maxLine bounds one request or response line.
const maxLine = 1 << 20

type op string

const (
	opHello     op = "hello"
	opStart     op = "start"
	opStop      op = "stop"
	opState     op = "state"
	opDialGuest op = "dialGuest"
)

type request struct {
	V  int `json:"v"`
	Op op  `json:"op"`
	// Spec, on start, must be the helper's own spec; it guards against an
	// agent starting the wrong instance's helper.
	Spec           *vmspec.VMSpec `json:"spec,omitempty"`
	GracefulMillis int64          `json:"gracefulMillis,omitempty"`
	Port           uint32         `json:"port,omitempty"`
}

type response struct {
	V     int          `json:"v"`
	OK    bool         `json:"ok"`
	State driver.State `json:"state,omitempty"`
	Error *wireError   `json:"error,omitempty"`
	Hello *Hello       `json:"hello,omitempty"`
	// Stop, on a stop's answer, is how the VM went down.
	Stop driver.StopMethod `json:"stop,omitempty"`
}

type wireError struct {
	Domain  string `json:"domain"`
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Hello is what a helper says about itself.
type Hello struct {
	InstanceUID string `json:"instanceUID"`
	VMName      string `json:"vmName"`
	PID         int    `json:"pid"`
}

// writeLine writes v as one JSON line.
func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readLine reads one line of at most maxLine bytes, without its newline.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrBadRequest, maxLine)
		}
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte("\n")), nil
		case err == bufio.ErrBufferFull:
		case err == io.EOF && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// bufferedConn is a connection whose first bytes may already sit in r, read
// ahead while reading the line before them.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
