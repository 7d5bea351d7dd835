package helper

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/boualleiguie/macrack-operator/internal/agent/driver"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
)

// Client is the agent's end of one helper's socket. Each call opens its own
// connection, so that a long start does not hold up a state query, and a
// dropped client leaves nothing behind in the helper. Its methods are safe
// for concurrent use.
type Client struct {
	path  string
	hello Hello

	mu     sync.Mutex
	closed bool
	calls  map[net.Conn]struct{}
}

// Dial connects to the helper at socketPath and checks that it speaks
// Version.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	c := &Client{path: socketPath, calls: map[net.Conn]struct{}{}}
	resp, err := c.call(ctx, request{Op: opHello})
	if err != nil {
		return nil, err
	}
	if resp.Hello == nil {
		return nil, fmt.Errorf("%w: hello from %s without identity", ErrBadRequest, socketPath)
	}
	c.hello = *resp.Hello
	return c, nil
}

// Hello is what the helper said about itself when dialled.
func (c *Client) Hello() Hello { return c.hello }

// Start starts the helper's VM, which must have been launched with spec.
// A start over the host's quota fails with the code-6 *driver.VZError.
func (c *Client) Start(ctx context.Context, spec vmspec.VMSpec) error {
	_, err := c.call(ctx, request{Op: opStart, Spec: &spec})
	return err
}

// Stop stops the VM: a guest shutdown request, then a forced stop after
// graceful.
func (c *Client) Stop(ctx context.Context, graceful time.Duration) error {
	_, err := c.StopVM(ctx, graceful)
	return err
}

// StopVM stops the VM as Stop does, and says how it went down: the
// framework's requestStop honoured within graceful, or forced after it
// (or the guest's own shutdown, if it got there first). The method is
// empty when the VM never ran, or the helper is too old to say.
func (c *Client) StopVM(ctx context.Context, graceful time.Duration) (driver.StopMethod, error) {
	resp, err := c.call(ctx, request{Op: opStop, GracefulMillis: graceful.Milliseconds()})
	if err != nil {
		return "", err
	}
	return resp.Stop, nil
}

// State is the VM's state.
func (c *Client) State(ctx context.Context) (driver.State, error) {
	resp, err := c.call(ctx, request{Op: opState})
	if err != nil {
		return "", err
	}
	return resp.State, nil
}

// DialGuest opens a stream to the guest's vsock port, through the helper.
// ctx bounds the dial only; the stream is the caller's to close.
func (c *Client) DialGuest(ctx context.Context, port uint32) (net.Conn, error) {
	conn, r, resp, err := c.open(ctx, request{Op: opDialGuest, Port: port})
	if err != nil {
		return nil, err
	}
	if err := c.release(conn); err != nil {
		conn.Close()
		return nil, err
	}
	if !resp.OK {
		conn.Close()
		return nil, c.failure(opDialGuest, resp)
	}
	return &bufferedConn{Conn: conn, r: r}, nil
}

// Close ends the client's calls in flight; later calls fail with
// ErrClientClosed. The helper and its VM run on: closing a client is what
// an agent exiting does.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for conn := range c.calls {
		conn.Close()
	}
	clear(c.calls)
	return nil
}

// call makes one request on its own connection.
func (c *Client) call(ctx context.Context, req request) (response, error) {
	conn, _, resp, err := c.open(ctx, req)
	if err != nil {
		return response{}, err
	}
	conn.Close()
	if err := c.release(conn); err != nil {
		return response{}, err
	}
	if !resp.OK {
		return resp, c.failure(req.Op, resp)
	}
	return resp, nil
}

// open dials, sends req and reads its response, leaving the connection
// open and tracked. ctx ending closes the connection.
func (c *Client) open(ctx context.Context, req request) (net.Conn, *bufio.Reader, response, error) {
	var resp response
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return nil, nil, resp, fmt.Errorf("dialing helper %s: %w", c.path, err)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.Close()
		return nil, nil, resp, ErrClientClosed
	}
	c.calls[conn] = struct{}{}
	c.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(err error) (net.Conn, *bufio.Reader, response, error) {
		stop()
		conn.Close()
		_ = c.release(conn)
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return nil, nil, resp, fmt.Errorf("helper %s, %s: %w", c.path, req.Op, err)
	}
	req.V = Version
	if err := writeLine(conn, req); err != nil {
		return fail(err)
	}
	r := bufio.NewReader(conn)
	line, err := readLine(r)
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return fail(fmt.Errorf("%w: undecodable response: %w", ErrBadRequest, err))
	}
	if !stop() {
		return fail(ctx.Err())
	}
	if resp.V != Version {
		return fail(fmt.Errorf("%w: the helper speaks %d, this client %d", ErrUnsupportedVersion, resp.V, Version))
	}
	return conn, r, resp, nil
}

// release untracks conn; it fails if the client was closed meanwhile.
func (c *Client) release(conn net.Conn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.calls, conn)
	if c.closed {
		return ErrClientClosed
	}
	return nil
}

// failure is a failed response's error, with a VZ error as *driver.VZError.
func (c *Client) failure(o op, resp response) error {
	if resp.Error == nil {
		return fmt.Errorf("helper %s, %s: %w: failed without an error", c.path, o, ErrBadRequest)
	}
	return fmt.Errorf("helper %s, %s: %w", c.path, o, fromWire(resp.Error))
}
