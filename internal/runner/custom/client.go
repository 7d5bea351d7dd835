package custom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// client is the stages' side of the socket.
type client struct {
	http *http.Client
}

func newClient(socket string) *client {
	var d net.Dialer
	return &client{http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		},
		// One request per stage process: nothing to keep alive.
		DisableKeepAlives: true,
		// The headers come at once; the body may take the whole job.
		MaxResponseHeaderBytes: 16 << 10,
	}}}
}

func (c *client) do(ctx context.Context, method, path string, body io.Reader, size int64, stage string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+socketHost+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
	}
	if stage != "" {
		req.Header.Set(HeaderStage, stage)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	return resp, nil
}

// probe asks whether the VM answers.
func (c *client) probe(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, pathProbe, nil, 0, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%w: %s", ErrUnreachable, errorBody(resp))
	}
	return nil
}

// cleanup tells the agent the job's stages are done.
func (c *client) cleanup(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodPost, pathCleanup, nil, 0, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("cleanup: %s", errorBody(resp))
	}
	return nil
}

// run sends script to the VM and copies its output to out. It returns
// the script's exit code; an error means the script did not run to one.
func (c *client) run(ctx context.Context, stage string, script io.Reader, size int64, out io.Writer) (int, error) {
	resp, err := c.do(ctx, http.MethodPost, pathRun, script, size, stage)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1, fmt.Errorf("%w: %s", ErrUnreachable, errorBody(resp))
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		return -1, fmt.Errorf("%w: reading the script's output: %w", ErrUnreachable, err)
	}
	// Trailers are there once the body is read to its end.
	if msg := resp.Trailer.Get(TrailerError); msg != "" {
		return -1, fmt.Errorf("%w: %s", ErrUnreachable, msg)
	}
	code, err := strconv.Atoi(resp.Trailer.Get(TrailerExitCode))
	if err != nil {
		return -1, fmt.Errorf("%w: the agent sent no exit code", ErrUnreachable)
	}
	return code, nil
}

// errorBody is the start of an error response, one line.
func errorBody(resp *http.Response) string {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = resp.Status
	}
	return oneLine(errors.Join(errors.New(msg), err).Error())
}
