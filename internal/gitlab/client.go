package gitlab

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds one request when Options.Timeout is zero. It is
// long because GitLab Workhorse may hold jobs/request open for its long
// polling duration (50 s where enabled) before answering 204.
const DefaultTimeout = 2 * time.Minute

// DefaultUserAgent is sent when Options.UserAgent is empty.
const DefaultUserAgent = "macrack (gitlab-runner API)"

// Body limits. Error bodies and small answers are read up to maxBody and
// no further; a job payload, which carries all of a job's variables and
// can legitimately pass 64 KiB, up to maxJobBody.
const (
	maxBody    = 64 << 10
	maxJobBody = 8 << 20
)

// Header names, as gitlab-runner and GitLab spell them.
const (
	headerRunnerToken    = "RUNNER-TOKEN" // common/consts.go RunnerToken
	headerJobToken       = "JOB-TOKEN"    // common/consts.go JobToken
	headerLastUpdate     = "X-GitLab-Last-Update"
	headerUpdateInterval = "X-GitLab-Trace-Update-Interval"
	headerJobStatus      = "Job-Status"
	headerRange          = "Range"
	headerContentRange   = "Content-Range"
)

// Options configure a Client.
type Options struct {
	// CABundle is PEM certificates trusted besides the system's roots,
	// for a GitLab behind a private CA.
	CABundle []byte
	// Timeout bounds each request; zero means DefaultTimeout.
	Timeout time.Duration
	// UserAgent is sent with each request; empty means DefaultUserAgent.
	UserAgent string
	// HTTPClient, if set, is used instead of one built from CABundle (it
	// is copied, never changed; its redirect policy is replaced with this
	// package's). Setting both is refused, so a CA is never silently
	// ignored.
	HTTPClient *http.Client
	// AllowHTTP accepts an http:// URL, for tests and loopback only.
	AllowHTTP bool
}

// Client talks to one GitLab. It holds no per-runner state (the caller
// carries last_update), so it is safe for concurrent use.
type Client struct {
	base *url.URL // ends in /api/v4/
	hc   *http.Client
	ua   string
}

// New returns a Client for the GitLab at baseURL, https://host[/path]. It
// refuses any other scheme unless o.AllowHTTP allows http, and a URL with
// credentials, a query or a fragment.
func New(baseURL string, o Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("%w: GitLab URL does not parse", ErrInvalidConfig)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && o.AllowHTTP:
	case u.Scheme == "http":
		return nil, fmt.Errorf("%w: GitLab URL must be https (http only when allowed, for tests)", ErrInvalidConfig)
	default:
		return nil, fmt.Errorf("%w: GitLab URL scheme %q is not https", ErrInvalidConfig, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: GitLab URL has no host", ErrInvalidConfig)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: GitLab URL must not carry credentials", ErrInvalidConfig)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, fmt.Errorf("%w: GitLab URL must not have a query or fragment", ErrInvalidConfig)
	}
	base := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/") + "/api/v4/"}

	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	var hc http.Client
	switch {
	case o.HTTPClient != nil && len(o.CABundle) > 0:
		return nil, fmt.Errorf("%w: set CABundle or HTTPClient, not both", ErrInvalidConfig)
	case o.HTTPClient != nil:
		hc = *o.HTTPClient
		if hc.Timeout == 0 {
			hc.Timeout = timeout
		}
	default:
		tr, err := transport(o.CABundle)
		if err != nil {
			return nil, err
		}
		hc = http.Client{Transport: tr, Timeout: timeout}
	}
	hc.CheckRedirect = checkRedirect

	ua := o.UserAgent
	if ua == "" {
		ua = DefaultUserAgent
	}
	return &Client{base: base, hc: &hc, ua: ua}, nil
}

// transport is the default transport trusting the system roots plus the
// bundle's certificates.
func transport(caBundle []byte) (*http.Transport, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if len(caBundle) > 0 && !pool.AppendCertsFromPEM(caBundle) {
		return nil, fmt.Errorf("%w: CA bundle holds no PEM certificate", ErrInvalidConfig)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	return tr, nil
}

// errRedirect is why a redirect was not followed.
var errRedirect = errors.New("redirect not followed")

// checkRedirect follows nothing: every call here is a POST, PUT, PATCH or
// DELETE carrying a token, and following a 307 or 308 would send the token
// on to wherever Location points. Go would also turn a redirected POST
// into a GET. A GET or HEAD, should one be added, may follow three
// redirects on the same host and scheme.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	if first.Method != http.MethodGet && first.Method != http.MethodHead {
		return http.ErrUseLastResponse
	}
	if len(via) >= 3 || req.URL.Host != first.URL.Host || req.URL.Scheme != first.URL.Scheme {
		return errRedirect
	}
	return nil
}

// call is one request.
type call struct {
	method   string
	path     string // relative to /api/v4/, such as "jobs/request"
	query    url.Values
	endpoint string // method and path for errors, such as "PUT /api/v4/jobs/12"
	header   http.Header
	body     []byte
	ctype    string
	secrets  []string // masked from anything reflected
	maxBody  int64    // how much of a success body to read
}

// response is an answer, its body read up to the call's limit.
type response struct {
	code      int
	header    http.Header
	body      []byte
	truncated bool
}

// do sends c and reads the answer. It returns an error only when no
// answer came; the caller decides what each status means.
func (cl *Client) do(ctx context.Context, c call) (*response, error) {
	u := cl.base.ResolveReference(&url.URL{Path: c.path, RawQuery: c.query.Encode()})
	req, err := http.NewRequestWithContext(ctx, c.method, u.String(), bytes.NewReader(c.body))
	if err != nil {
		return nil, fmt.Errorf("%s: building request: %w", c.endpoint, err)
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", cl.ua)
	if c.ctype != "" {
		req.Header.Set("Content-Type", c.ctype)
	}
	res, err := cl.hc.Do(req)
	if err != nil {
		return nil, &transportError{
			endpoint:  c.endpoint,
			msg:       sanitise(err.Error(), c.secrets...),
			err:       err,
			cancelled: ctx.Err() != nil,
		}
	}
	defer res.Body.Close()
	limit := c.maxBody
	if limit <= 0 || res.StatusCode >= 300 {
		limit = maxBody
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return nil, &transportError{
			endpoint:  c.endpoint,
			msg:       "reading the answer: " + sanitise(err.Error(), c.secrets...),
			err:       err,
			cancelled: ctx.Err() != nil,
		}
	}
	r := &response{code: res.StatusCode, header: res.Header, body: body}
	if int64(len(body)) > limit {
		r.body, r.truncated = body[:limit], true
	}
	return r, nil
}

// statusError builds the error for an answer the endpoint does not expect.
func (r *response) statusError(c call) error {
	if r.code >= 300 && r.code < 400 {
		return &StatusError{Endpoint: c.endpoint, Code: r.code, Message: "redirect not followed"}
	}
	return &StatusError{
		Endpoint:  c.endpoint,
		Code:      r.code,
		Message:   messageOf(r.body, r.header.Get("Content-Type"), c.secrets...),
		JobStatus: sanitise(r.header.Get(headerJobStatus)),
	}
}

// isJSON says whether the answer declares itself JSON, as gitlab-runner
// requires of a body it decodes (network/client.go).
func (r *response) isJSON() bool {
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}
