package gitlab

import (
	"strings"
	"testing"
)

func TestRedactMasksSecretsAndTokenShapedText(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"a known secret is masked", "pass=hunter2hunter2", []string{"hunter2hunter2"}, "pass=" + Masked},
		{"a longer secret containing a shorter one is masked whole", "x abcdefgh12 y", []string{"abcdefgh", "abcdefgh12"}, "x " + Masked + " y"},
		{"a runner token nobody named is masked by its shape", "t=glrt-abcdef123456", nil, "t=" + Masked},
		{"a job token glued to other text is masked", "[31mglcbt-abcdef123456", nil, "[31m" + Masked},
		{"an old registration token is masked", "GR1348941abcdef", nil, Masked},
		{"text without secrets is kept", "403 Forbidden - Job is not running", []string{"", "zzz-never"}, "403 Forbidden - Job is not running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Redact(tc.in, tc.secrets...); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSanitiseCutsAfterMasking(t *testing.T) {
	secret := "s3cr3t-" + strings.Repeat("q", 40)
	in := strings.Repeat("a", maxMessage-5) + secret
	got := sanitise(in, secret)
	if strings.Contains(got, "qqqq") || strings.Contains(got, "s3cr3t") {
		t.Fatalf("a cut left part of the secret: %q", got)
	}
	if !strings.HasSuffix(got, "…") || len([]rune(got)) != maxMessage+1 {
		t.Fatalf("want a cut excerpt, got %d runes", len([]rune(got)))
	}
}

func TestSanitiseDropsControlCharactersAndEscapes(t *testing.T) {
	got := sanitise("a\x00b\x1b[31mred\x1b[0m\n\n  c\td")
	if got != "abred c d" {
		t.Fatalf("got %q", got)
	}
	if strings.ContainsAny(got, "\x00\x1b\n\t") {
		t.Fatalf("control characters kept: %q", got)
	}
}
