package guest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// testToken is the secret every redaction test looks for.
const testToken = "glrt-t0k3n-MUST-NOT-LEAK"

func testConfig() Config {
	return Config{Version: ConfigVersion, Runner: &RunnerConfig{URL: "https://gitlab.example.com", Token: testToken,
		SystemID: "s_0123456789ab", Tags: []string{"macos", "xcode-16"}, MaxJobDuration: Duration(time.Hour)}}
}

func rawConfig(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAConfigSurvivesJSONAndValidates(t *testing.T) {
	want := testConfig()
	want.Runner.CABundle = testCA(t)
	raw := rawConfig(t, want)
	if !strings.Contains(string(raw), testToken) {
		t.Fatal("the JSON, which is what is sealed, must carry the token")
	}
	if !strings.Contains(string(raw), `"maxJobDuration":"1h0m0s"`) {
		t.Fatalf("maxJobDuration is not written as a duration string: %s", raw)
	}
	got, err := ParseConfig(raw)
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if !got.Equal(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
}

func TestMaxJobDurationReadsADurationStringOrSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{`"90m"`, 90 * time.Minute, true},
		{`"1h30m"`, 90 * time.Minute, true},
		{`5400`, 90 * time.Minute, true},
		{`1.5`, 1500 * time.Millisecond, true},
		{`0`, 0, true},
		{`"ninety minutes"`, 0, false},
		{`true`, 0, false},
		{`1e300`, 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			raw := `{"version":1,"runner":{"url":"https://gitlab.example.com","token":"t","maxJobDuration":` + tc.in + `}}`
			c, err := ParseConfig([]byte(raw))
			if tc.ok != (err == nil) {
				t.Fatalf("got %v, want ok=%v", err, tc.ok)
			}
			if err == nil && time.Duration(c.Runner.MaxJobDuration) != tc.want {
				t.Fatalf("got %s, want %s", time.Duration(c.Runner.MaxJobDuration), tc.want)
			}
			if err != nil && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "maxJobDuration")) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig naming maxJobDuration", err)
			}
		})
	}
}

func TestValidateRefusesAConfigTheGuestCannotRun(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("positive control: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		says   string
	}{
		{"a config of another version", func(c *Config) { c.Version = 2 }, "version 2"},
		{"a config with no workload", func(c *Config) { c.Runner = nil }, "no workload"},
		{"a runner without a URL", func(c *Config) { c.Runner.URL = "" }, "url is empty"},
		{"a runner URL that is not http", func(c *Config) { c.Runner.URL = "ftp://gitlab.example.com" }, "not http or https"},
		{"a relative runner URL", func(c *Config) { c.Runner.URL = "/api/v4" }, "not http or https"},
		{"a runner URL with no host", func(c *Config) { c.Runner.URL = "https://" }, "no host"},
		{"a runner URL with credentials", func(c *Config) { c.Runner.URL = "https://root:" + testToken + "@gitlab.example.com" }, "credentials"},
		{"a runner without a token", func(c *Config) { c.Runner.Token = "" }, "token is empty"},
		{"a token with a newline", func(c *Config) { c.Runner.Token = testToken + "\n" }, "control characters"},
		{"a token too long", func(c *Config) { c.Runner.Token = strings.Repeat(testToken, 100) }, "token is over"},
		{"a system id with a space", func(c *Config) { c.Runner.SystemID = "s 1" }, "systemID"},
		{"a CA bundle that is no PEM", func(c *Config) { c.Runner.CABundle = "not a certificate" }, "no PEM certificate"},
		{"an empty tag", func(c *Config) { c.Runner.Tags = []string{"macos", ""} }, "tag 1"},
		{"a tag with a comma", func(c *Config) { c.Runner.Tags = []string{"macos,linux"} }, "tag 0"},
		{"a negative job duration", func(c *Config) { c.Runner.MaxJobDuration = Duration(-time.Second) }, "maxJobDuration"},
		{"a job duration over a month", func(c *Config) { c.Runner.MaxJobDuration = Duration(32 * 24 * time.Hour) }, "maxJobDuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			tc.change(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want ErrInvalidConfig saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Fatalf("the error %q quotes the token", err)
			}
		})
	}
}

// A Config never prints its token, whatever the verb, the flags, or the
// logger; and no error about a broken Config quotes it, even where the
// token sits in the wrong field.
func TestAConfigNeverPrintsItsToken(t *testing.T) {
	c := testConfig()
	c.Runner.CABundle = testCA(t)
	r := *c.Runner
	conf := Configure{Config: rawConfig(t, c)}
	var printed []string
	for _, v := range []any{c, &c, r, &r, conf, &conf, []Config{c}, map[string]RunnerConfig{"r": r}, struct{ C Config }{c}} {
		printed = append(printed, fmt.Sprintf("%v %+v %#v %s %q %x %d", v, v, v, v, v, v, v))
	}
	logs := &logBuffer{}
	logs.logger().Info("Printing a config", "config", c, "runner", r, "configure", conf, "pointer", &c)
	printed = append(printed, logs.String())
	// A logger that encodes by reflection, as zap does, asks MarshalLog.
	reflecting := funcr.New(func(prefix, args string) { printed = append(printed, args) }, funcr.Options{})
	reflecting.Info("Printing a config", "config", c)
	for _, p := range printed {
		if strings.Contains(p, testToken) {
			t.Fatalf("printed the token: %s", p)
		}
	}
	// The positive control: what is printed is the config, redacted.
	if p := fmt.Sprintf("%+v", c); !strings.Contains(p, "gitlab.example.com") || !strings.Contains(p, redacted) {
		t.Fatalf("%q does not show the config with its token redacted", p)
	}

	for _, raw := range []string{
		`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"` + testToken + `"`,
		`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"` + testToken + `"}}x`,
		`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"` + testToken + `","tags":"` + testToken + `"}}`,
		`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"t","maxJobDuration":"` + testToken + `"}}`,
		`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"t","maxJobDuration":` + testToken + `}}`,
		`{"version":"` + testToken + `"}`,
		`"` + testToken + `"`,
		`{"version":1,"runner":{"url":"` + testToken + `","token":"t"}}`,
		`{"version":1,"runner":{"url":"https://gitlab.example.com","token":"` + testToken + ` "}}`,
	} {
		_, err := ParseConfig([]byte(raw))
		if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("ParseConfig(%s): got %v, want ErrInvalidConfig", raw, err)
		}
		if strings.Contains(err.Error(), testToken) || strings.Contains(err.Error(), "t0k3n") {
			t.Fatalf("the error %q quotes the token", err)
		}
	}
}

func TestOneConfigTakesOneConfigOnly(t *testing.T) {
	var o OneConfig
	if _, ok := o.Get(); ok {
		t.Fatal("a fresh OneConfig holds a config")
	}
	c := testConfig()
	if first, err := o.Set(c); !first || err != nil {
		t.Fatalf("the first Set: %v, %v; want it taken", first, err)
	}
	// The caller's later changes do not reach what was taken.
	c.Runner.Tags[0] = "linux"
	same := testConfig()
	if first, err := o.Set(same); first || err != nil {
		t.Fatalf("an equal config again: %v, %v; want no change and no error", first, err)
	}
	other := testConfig()
	other.Runner.Token = "glrt-another"
	_, err := o.Set(other)
	if !errors.Is(err, ErrAlreadyConfigured) || strings.Contains(err.Error(), "glrt") {
		t.Fatalf("another config: got %v, want ErrAlreadyConfigured quoting no token", err)
	}
	if got, ok := o.Get(); !ok || !got.Equal(testConfig()) {
		t.Fatalf("holds %v, want the first config", got)
	}
}

// testCA is a PEM certificate, for a config's CA bundle.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
