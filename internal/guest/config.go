package guest

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// ConfigVersion is the Config layout this package reads and writes.
const ConfigVersion = 1

// Bounds a valid Config keeps to; the whole is sealed in at most 16 KiB.
const (
	maxURLLength      = 2048
	maxTokenLength    = 1024
	maxSystemIDLength = 64
	maxCABundleLength = 12 << 10
	maxTags           = 64
	maxTagLength      = 128
	// maxJobDuration bounds MaxJobDuration: GitLab's own job timeout
	// stops at a month.
	maxJobDuration = 31 * 24 * time.Hour
)

// redacted stands in for a secret wherever a Config is printed.
const redacted = "[redacted]"

// Config is what a guest is configured with: the plaintext the workload
// controller seals into an instance's spec.guestConfig, which the host
// agent opens and forwards in a Configure. It holds secrets, so it never
// prints them: String, GoString, Format and MarshalLog redact the token.
// Only encoding/json writes it whole, to be sealed.
type Config struct {
	// Version is ConfigVersion.
	Version int `json:"version"`
	// Runner makes the guest a CI runner that runs one job.
	Runner *RunnerConfig `json:"runner,omitempty"`
}

// RunnerConfig is a GitLab CI runner's configuration, for one job.
type RunnerConfig struct {
	// URL is the GitLab instance's URL, http or https.
	URL string `json:"url"`
	// Token is the runner authentication token (glrt-…): a secret.
	Token string `json:"token"`
	// SystemID tells this runner's jobs apart from other machines' that
	// share the token, as GitLab's system_id does.
	SystemID string `json:"systemID,omitempty"`
	// CABundle is PEM certificates to trust for URL, besides the system's.
	CABundle string `json:"caBundle,omitempty"`
	// Tags are the runner's tags, which the job must match.
	Tags []string `json:"tags,omitempty"`
	// MaxJobDuration bounds the one job; zero leaves it to GitLab's
	// timeout.
	MaxJobDuration Duration `json:"maxJobDuration,omitempty"`
}

// Duration is a time.Duration in JSON either as a Go duration string
// ("1h30m") or as a number of seconds. It writes the string.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string or a number of seconds. Its
// errors never quote the value: a Config's values may be secrets put in
// the wrong place.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return durationError("not a string")
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return durationError("not a Go duration such as 1h30m")
		}
		*d = Duration(v)
		return nil
	}
	secs, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(secs) || math.Abs(secs) > float64(math.MaxInt64/int64(time.Second)) {
		return durationError("neither a Go duration string nor a number of seconds")
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// ParseConfig decodes and validates a Config. Unknown fields are ignored,
// as a protocol minor version's are. Its errors name fields and offsets,
// never values.
func ParseConfig(raw []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return Config{}, fmt.Errorf("%w: %s", ErrInvalidConfig, describeJSONError(err))
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// describeJSONError says what is wrong with a Config's JSON without
// quoting it: encoding/json's own messages may quote a value.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("not valid JSON (at byte %d)", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Sprintf("not a JSON object but a %s", typ.Value)
		}
		return fmt.Sprintf("%s is a JSON %s, want %s", typ.Field, typ.Value, typ.Type)
	}
	var d durationError
	if errors.As(err, &d) {
		return "maxJobDuration is " + string(d)
	}
	// Nothing else is known to name no value: say nothing of it.
	return "it does not decode"
}

// durationError is a Duration's decoding error, which quotes no value.
type durationError string

func (e durationError) Error() string { return string(e) }

// Validate checks c: its version, and one workload, valid. Its errors wrap
// ErrInvalidConfig and never quote the token.
func (c Config) Validate() error {
	if c.Version != ConfigVersion {
		return fmt.Errorf("%w: version %d, this guest agent reads version %d", ErrInvalidConfig, c.Version, ConfigVersion)
	}
	if c.Runner == nil {
		return fmt.Errorf("%w: it names no workload (runner)", ErrInvalidConfig)
	}
	if err := c.Runner.Validate(); err != nil {
		return fmt.Errorf("%w: runner: %w", ErrInvalidConfig, err)
	}
	return nil
}

// Validate checks a runner's configuration. Its errors never quote the
// token, nor the URL (which might hold credentials).
func (r RunnerConfig) Validate() error {
	u, err := url.Parse(r.URL)
	switch {
	case r.URL == "":
		return errors.New("url is empty")
	case len(r.URL) > maxURLLength:
		return fmt.Errorf("url is over %d characters", maxURLLength)
	case err != nil:
		return errors.New("url is not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("url is not http or https")
	case u.Host == "":
		return errors.New("url names no host")
	case u.User != nil:
		return errors.New("url carries credentials; the token is the runner's only credential")
	case r.Token == "":
		return errors.New("token is empty")
	case len(r.Token) > maxTokenLength:
		return fmt.Errorf("token is over %d characters", maxTokenLength)
	case !printable(r.Token):
		return errors.New("token holds spaces or control characters")
	case len(r.SystemID) > maxSystemIDLength || !printable(r.SystemID):
		return fmt.Errorf("systemID is over %d characters or holds spaces or control characters", maxSystemIDLength)
	case len(r.CABundle) > maxCABundleLength:
		return fmt.Errorf("caBundle is over %d bytes", maxCABundleLength)
	case r.CABundle != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(r.CABundle)):
		return errors.New("caBundle holds no PEM certificate")
	case len(r.Tags) > maxTags:
		return fmt.Errorf("%d tags, at most %d", len(r.Tags), maxTags)
	case r.MaxJobDuration < 0 || time.Duration(r.MaxJobDuration) > maxJobDuration:
		return fmt.Errorf("maxJobDuration is not between 0 and %s", maxJobDuration)
	}
	for i, t := range r.Tags {
		// GitLab sends tag_list comma-separated: a comma would be two tags.
		if t == "" || len(t) > maxTagLength || strings.ContainsRune(t, ',') || strings.IndexFunc(t, unicode.IsControl) >= 0 {
			return fmt.Errorf("tag %d is empty, over %d characters, or holds a comma or a control character", i, maxTagLength)
		}
	}
	return nil
}

// printable reports whether s holds no space or control character.
func printable(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) < 0
}

// Equal reports whether c and o are the same configuration.
func (c Config) Equal(o Config) bool {
	if c.Version != o.Version || (c.Runner == nil) != (o.Runner == nil) {
		return false
	}
	return c.Runner == nil || c.Runner.equal(*o.Runner)
}

func (r RunnerConfig) equal(o RunnerConfig) bool {
	return r.URL == o.URL && r.Token == o.Token && r.SystemID == o.SystemID && r.CABundle == o.CABundle &&
		slices.Equal(r.Tags, o.Tags) && r.MaxJobDuration == o.MaxJobDuration
}

// String prints c with its secrets redacted.
func (c Config) String() string {
	runner := "<nil>"
	if c.Runner != nil {
		runner = c.Runner.String()
	}
	return fmt.Sprintf("{Version:%d Runner:%s}", c.Version, runner)
}

// GoString prints c as Go syntax, its secrets redacted.
func (c Config) GoString() string {
	runner := "nil"
	if c.Runner != nil {
		runner = "&" + c.Runner.GoString()
	}
	return fmt.Sprintf("guest.Config{Version:%d, Runner:%s}", c.Version, runner)
}

// Format prints GoString for %#v and String for every other verb, so that
// no verb or flag prints a secret.
func (c Config) Format(f fmt.State, verb rune) { format(f, verb, c.String, c.GoString) }

// MarshalLog implements logr.Marshaler: a logger that encodes values by
// reflection gets the redacted form.
func (c Config) MarshalLog() any { return c.String() }

// String prints r with its token redacted and its CA bundle as a size.
func (r RunnerConfig) String() string {
	return fmt.Sprintf("{URL:%s Token:%s SystemID:%s CABundle:%s Tags:%v MaxJobDuration:%s}",
		r.URL, secret(r.Token), r.SystemID, bundle(r.CABundle), r.Tags, time.Duration(r.MaxJobDuration))
}

// GoString prints r as Go syntax, its token redacted.
func (r RunnerConfig) GoString() string {
	return fmt.Sprintf("guest.RunnerConfig{URL:%q, Token:%q, SystemID:%q, CABundle:%q, Tags:%#v, MaxJobDuration:%d}",
		r.URL, secret(r.Token), r.SystemID, bundle(r.CABundle), r.Tags, int64(r.MaxJobDuration))
}

// Format prints GoString for %#v and String for every other verb.
func (r RunnerConfig) Format(f fmt.State, verb rune) { format(f, verb, r.String, r.GoString) }

// MarshalLog implements logr.Marshaler.
func (r RunnerConfig) MarshalLog() any { return r.String() }

// String prints a Configure without its Config, which holds secrets.
func (m Configure) String() string {
	return fmt.Sprintf("{Config:[%d bytes %s]}", len(m.Config), redacted)
}

// GoString prints a Configure as Go syntax, without its Config.
func (m Configure) GoString() string {
	return fmt.Sprintf("guest.Configure{Config:[%d bytes %s]}", len(m.Config), redacted)
}

// Format prints GoString for %#v and String for every other verb.
func (m Configure) Format(f fmt.State, verb rune) { format(f, verb, m.String, m.GoString) }

// MarshalLog implements logr.Marshaler.
func (m Configure) MarshalLog() any { return m.String() }

func format(f fmt.State, verb rune, str, goStr func() string) {
	s := str()
	switch {
	case verb == 'v' && f.Flag('#'):
		s = goStr()
	case verb == 'q':
		s = strconv.Quote(s)
	}
	_, _ = f.Write([]byte(s))
}

func secret(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

func bundle(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("[%d bytes]", len(s))
}

// OneConfig holds the one Config a guest takes, for a Workload's
// Configure: one VM, one job. The first Config is taken, an equal one
// again is no change, and a different one is refused, since the VM may
// have started the first one's job. It is safe for concurrent use.
type OneConfig struct {
	mu  sync.Mutex
	cfg *Config
}

// Set takes c if no Config was taken: first is true then, and the caller
// starts the workload. An equal Config again returns false and no error;
// a different one wraps ErrAlreadyConfigured.
func (o *OneConfig) Set(c Config) (first bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cfg == nil {
		cp := c
		if c.Runner != nil {
			r := *c.Runner
			r.Tags = slices.Clone(r.Tags)
			cp.Runner = &r
		}
		o.cfg = &cp
		return true, nil
	}
	if o.cfg.Equal(c) {
		return false, nil
	}
	return false, fmt.Errorf("%w: this guest took another configuration already, and runs one job only", ErrAlreadyConfigured)
}

// Get is the Config taken, if any.
func (o *OneConfig) Get() (Config, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cfg == nil {
		return Config{}, false
	}
	return *o.cfg, true
}
