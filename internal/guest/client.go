package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCallTimeout bounds a Client call whose ctx has no deadline, so a
// guest that stops answering cannot hang the host agent.
const DefaultCallTimeout = 30 * time.Second

// Client is the host side of one connection to a guest agent. Its calls
// are serialised: the protocol is one request, one answer. Any failure that
// leaves the stream in an unknown state (a garbage answer, a timeout, a
// cancelled ctx mid-call) closes the connection, and later calls return
// ErrClosed: dial again for a new Client.
type Client struct {
	conn    net.Conn
	version string

	// Close does not take mu, so that it can interrupt a call in flight.
	shut      atomic.Bool
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	ack    *HelloAck
	failed error
}

// NewClient wraps conn, such as the one the VM helper's DialGuest returns.
// The Client owns conn and closes it.
func NewClient(conn net.Conn) *Client {
	return &Client{conn: conn, version: ProtocolVersion}
}

// Handshake sends Hello and checks the guest's HelloAck, once: later calls
// return the first answer. It wraps ErrUnsupportedVersion if the guest
// speaks, or refuses, another protocol major.
func (c *Client) Handshake(ctx context.Context) (HelloAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handshake(ctx)
}

// Report asks the guest for a Report, shaking hands first if needed. An
// error wrapping ErrRemote without ErrClosed means the guest could not build
// the report this time and the connection is still usable.
func (c *Client) Report(ctx context.Context) (Report, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.handshake(ctx); err != nil {
		return Report{}, err
	}
	m, err := c.roundTrip(ctx, ReportRequest{})
	if err != nil {
		return Report{}, fmt.Errorf("asking the guest for a report: %w", err)
	}
	switch m := m.(type) {
	case Report:
		return m, nil
	case Error:
		err := remoteError(m)
		if m.Code != CodeReportFailed {
			c.fail(err)
		}
		return Report{}, fmt.Errorf("asking the guest for a report: %w", err)
	}
	err = fmt.Errorf("%w: guest answered a ReportRequest with %s", ErrUnexpectedMessage, m.Type())
	c.fail(err)
	return Report{}, err
}

// Shutdown asks the guest to shut macOS down, shaking hands first if
// needed, and returns once the guest acknowledged: the VM stops some time
// after, and the connection ends with it. A guest that is older than 1.1
// is not asked (ErrShutdownUnsupported); one that cannot act on it
// answers an Error wrapping ErrRemote. The guest may drop the connection
// before its acknowledgement reaches the host: an error then does not
// prove that it is not shutting down.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ack, err := c.handshake(ctx)
	if err != nil {
		return err
	}
	if !knowsShutdown(ack.ProtocolVersion) {
		return fmt.Errorf("%w: guest agent %q speaks protocol %s", ErrShutdownUnsupported, ack.AgentVersion, ack.ProtocolVersion)
	}
	m, err := c.roundTrip(ctx, ShutdownRequest{})
	if err != nil {
		return fmt.Errorf("asking the guest to shut down: %w", err)
	}
	switch m := m.(type) {
	case ShutdownAck:
		return nil
	case Error:
		err := remoteError(m)
		if m.Code != CodeShutdownFailed {
			c.fail(err)
		}
		return fmt.Errorf("asking the guest to shut down: %w", err)
	}
	err = fmt.Errorf("%w: guest answered a ShutdownRequest with %s", ErrUnexpectedMessage, m.Type())
	c.fail(err)
	return err
}

// Configure hands the guest its configuration, raw, the plaintext of the
// instance's sealed guest config, shaking hands first if needed, and
// returns once the guest's Workload took it. A guest that is older than
// 1.2 is not sent it (ErrConfigureUnsupported): it would close the
// connection on the unknown frame. One that refuses it answers an Error
// wrapping ErrRemote, and the connection stays usable. raw holds secrets:
// no error quotes it, and the caller clears it after.
func (c *Client) Configure(ctx context.Context, raw []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ack, err := c.handshake(ctx)
	if err != nil {
		return err
	}
	if !KnowsConfigure(ack.ProtocolVersion) {
		return fmt.Errorf("%w: guest agent %q speaks protocol %s", ErrConfigureUnsupported, ack.AgentVersion, ack.ProtocolVersion)
	}
	if !json.Valid(raw) {
		// Checked here so that the encoder's error, which may quote a
		// byte of raw, never surfaces.
		return fmt.Errorf("%w: the config to send is not JSON", ErrInvalidConfig)
	}
	m, err := c.roundTrip(ctx, Configure{Config: raw})
	if err != nil {
		return fmt.Errorf("configuring the guest: %w", err)
	}
	switch m := m.(type) {
	case ConfigureAck:
		return nil
	case Error:
		err := remoteError(m)
		if m.Code != CodeConfigureFailed {
			c.fail(err)
		}
		return fmt.Errorf("configuring the guest: %w", err)
	}
	err = fmt.Errorf("%w: guest answered a Configure with %s", ErrUnexpectedMessage, m.Type())
	c.fail(err)
	return err
}

// Close closes the connection, interrupting a call in flight. That call
// and later ones return ErrClosed.
func (c *Client) Close() error {
	c.shut.Store(true)
	return c.closeConn()
}

func (c *Client) closeConn() error {
	c.closeOnce.Do(func() {
		if err := c.conn.Close(); err != nil {
			c.closeErr = fmt.Errorf("closing the guest connection: %w", err)
		}
	})
	return c.closeErr
}

// handshake runs under c.mu.
func (c *Client) handshake(ctx context.Context) (HelloAck, error) {
	if c.ack != nil {
		return *c.ack, nil
	}
	m, err := c.roundTrip(ctx, Hello{ProtocolVersion: c.version})
	if err != nil {
		return HelloAck{}, fmt.Errorf("guest handshake: %w", err)
	}
	switch m := m.(type) {
	case HelloAck:
		if err := compatible(c.version, m.ProtocolVersion); err != nil {
			err = fmt.Errorf("guest handshake: guest agent %q: %w", m.AgentVersion, err)
			c.fail(err)
			return HelloAck{}, err
		}
		c.ack = &m
		return m, nil
	case Error:
		err := fmt.Errorf("guest handshake: %w", remoteError(m))
		c.fail(err)
		return HelloAck{}, err
	}
	err = fmt.Errorf("guest handshake: %w: guest answered Hello with %s", ErrUnexpectedMessage, m.Type())
	c.fail(err)
	return HelloAck{}, err
}

// roundTrip writes req and reads one answer within ctx, or
// DefaultCallTimeout if ctx has no deadline. It runs under c.mu, and
// closes the connection on any failure.
func (c *Client) roundTrip(ctx context.Context, req Message) (Message, error) {
	if c.shut.Load() {
		return nil, ErrClosed
	}
	if c.failed != nil {
		return nil, c.failed
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: the stream is still in step.
		return nil, err
	}
	// Conn deadlines are wall-clock times: the runtime's poller enforces them.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultCallTimeout)
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		c.fail(err)
		return nil, fmt.Errorf("setting the call deadline: %w", err)
	}
	// A deadline in the past wakes a blocked read or write on cancellation.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	m, err := c.exchange(req)
	if !stop() {
		// Let it finish, so it cannot cut short the next call.
		<-fired
	}
	if err != nil {
		if c.shut.Load() {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		} else if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w: %w", cerr, err)
		} else if ok && errors.Is(err, os.ErrDeadlineExceeded) {
			// The conn deadline can beat ctx's own timer by a hair.
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		c.fail(err)
		return nil, err
	}
	return m, nil
}

func (c *Client) exchange(req Message) (Message, error) {
	f, err := Encode(req)
	if err != nil {
		return nil, err
	}
	if f.Type == TypeConfigure {
		// Its payload holds secrets: leave no copy of them about.
		defer clear(f.Payload)
	}
	if err := WriteFrame(c.conn, f); err != nil {
		return nil, err
	}
	m, err := ReadMessage(c.conn)
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("guest closed the connection: %w", err)
	}
	return m, err
}

// fail closes the connection after err; later calls return ErrClosed
// wrapping it. It runs under c.mu.
func (c *Client) fail(err error) {
	if c.failed == nil {
		c.failed = fmt.Errorf("%w after: %w", ErrClosed, err)
	}
	_ = c.closeConn()
}

// remoteError turns a guest's Error into a Go error wrapping ErrRemote, and
// ErrUnsupportedVersion too if the guest refused our version.
func remoteError(m Error) error {
	if m.Code == CodeUnsupportedVersion {
		return fmt.Errorf("%w: %w: %s", ErrRemote, ErrUnsupportedVersion, m.Message)
	}
	if m.Code != "" {
		return fmt.Errorf("%w: %s: %s", ErrRemote, m.Code, m.Message)
	}
	return fmt.Errorf("%w: %s", ErrRemote, m.Message)
}
