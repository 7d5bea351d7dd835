package gitlab

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Masked replaces a secret wherever this package reflects text, the same
// placeholder gitlab-runner writes into traces.
const Masked = "[MASKED]"

// maxMessage bounds the excerpt of GitLab's message an error carries.
const maxMessage = 160

// tokenShaped matches GitLab's prefixed tokens (glrt-, glcbt-, glpat-,
// glrtr-, gldt-, …; helpers/shorten_token.go and GitLab's token prefixes)
// and old registration tokens (GR1348941…), so that a message that quotes
// a token it was not told about is still masked. It is anchored on no word
// boundary, so that a token glued to other text is caught too, at the
// price of masking the odd word such as "glossary-entries".
var tokenShaped = regexp.MustCompile(`gl[a-z]{2,8}-[0-9A-Za-z_.\-]{6,}|GR1348941[0-9A-Za-z_\-]+`)

// ansiEscape matches terminal escape sequences, removed before masking so
// that none can split a token from the pattern's view.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// Redact returns s with every non-empty secret, and anything shaped like a
// GitLab token, replaced by Masked. Longer secrets go first, so a secret
// that contains another is masked whole.
func Redact(s string, secrets ...string) string {
	sorted := make([]string, 0, len(secrets))
	for _, sec := range secrets {
		if sec != "" {
			sorted = append(sorted, sec)
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	for _, sec := range sorted {
		s = strings.ReplaceAll(s, sec, Masked)
	}
	return tokenShaped.ReplaceAllString(s, Masked)
}

// sanitise makes text safe to put in an error: printable characters only,
// whitespace collapsed, secrets masked, and then cut to maxMessage runes,
// masking before cutting so that a cut cannot leave half a token behind.
func sanitise(s string, secrets ...string) string {
	var b strings.Builder
	space := false
	for _, r := range ansiEscape.ReplaceAllString(s, "") {
		switch {
		case r == utf8.RuneError:
			continue
		case unicode.IsSpace(r):
			space = true
			continue
		case !unicode.IsPrint(r):
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	out := Redact(b.String(), secrets...)
	if utf8.RuneCountInString(out) > maxMessage {
		out = string([]rune(out)[:maxMessage]) + "…"
	}
	return out
}

// messageOf extracts GitLab's error text from a body: Grape answers
// {"message": "403 Forbidden"}, {"message": {"field": ["is invalid"]}}
// (network/client.go's ErrorResponseMessage reads both) or, for a missing
// parameter, {"error": "token is missing"}. A plain-text body is used as
// it is; anything else, such as a proxy's HTML page, is not reflected.
func messageOf(body []byte, contentType string, secrets ...string) string {
	if len(body) == 0 {
		return ""
	}
	if strings.HasPrefix(contentType, "text/plain") {
		return sanitise(string(body), secrets...)
	}
	var v struct {
		Message json.RawMessage `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	msg := flatten(v.Message)
	if msg == "" {
		msg = flatten(v.Error)
	}
	return sanitise(msg, secrets...)
}

// flatten renders a message that may be a string, a map of field to
// messages, or anything else JSON, as one line.
func flatten(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var fields map[string][]any
	if json.Unmarshal(raw, &fields) == nil {
		keys := make([]string, 0, len(fields))
		for k := range fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			vals := make([]string, 0, len(fields[k]))
			for _, v := range fields[k] {
				vals = append(vals, fmt.Sprint(v))
			}
			parts = append(parts, k+": "+strings.Join(vals, "; "))
		}
		return strings.Join(parts, ", ")
	}
	return string(raw)
}
