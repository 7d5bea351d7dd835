package docs

import (
	"fmt"
	"regexp"
	"strings"
)

// Match says whether what a block printed (got) is what its output block
// shows (want), loosely: the parts that change from run to run match any
// value of their kind, and the columns a table gains do not matter.
//
//   - Ages and durations (4s, 2m3s), RFC 3339 times, UUIDs, hex runs of 8
//     or more (UIDs, system IDs), loopback ports, and `...` (anything) are
//     variable.
//   - A table (its first line upper-case column names, three or more spaces
//     apart, as kubectl prints them) matches if got has a header with every
//     column want names, and want's rows appear in got's, in order, each
//     named cell matching. Columns want does not name are ignored, so a
//     printer column added later breaks no page.
//   - Anything else matches if want, with runs of white space as one, is in
//     got, so a line the page wraps still matches.
func Match(want, got string) error {
	want = strings.Trim(want, "\n")
	if header, ok := tableHeader(firstLine(want)); ok {
		return matchTable(header, want, got)
	}
	re, err := regexp.Compile("(?s)" + pattern(strings.Fields(want)))
	if err != nil {
		return fmt.Errorf("the output block is no pattern: %w", err)
	}
	if !re.MatchString(strings.Join(strings.Fields(got), " ")) {
		return fmt.Errorf("the output is not what the page shows:\n--- the page\n%s\n--- got\n%s", want, got)
	}
	return nil
}

var (
	// variable are the parts of a token that change from run to run, and
	// what each matches.
	variable = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)` +
		`|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}` +
		`|127\.0\.0\.1:\d+` +
		`|[0-9a-f]{8,}` +
		`|\.\.\.`)
	age       = regexp.MustCompile(`^(\d+(ms|s|m|h|d|y))+$`)
	anyAge    = `(?:(?:\d+(?:ms|s|m|h|d|y))+|<invalid>|<unknown>)`
	columnSep = regexp.MustCompile(`\s{3,}`)
	upperCol  = regexp.MustCompile(`^[A-Z][A-Z0-9 ._()-]*$`)
)

// pattern is the regular expression of tokens, one or more spaces apart.
func pattern(tokens []string) string {
	parts := make([]string, len(tokens))
	for i, t := range tokens {
		parts[i] = tokenPattern(t)
	}
	return strings.Join(parts, " ")
}

func tokenPattern(t string) string {
	if age.MatchString(t) {
		return anyAge
	}
	var b strings.Builder
	last := 0
	for _, loc := range variable.FindAllStringIndex(t, -1) {
		b.WriteString(regexp.QuoteMeta(t[last:loc[0]]))
		v := t[loc[0]:loc[1]]
		switch {
		case v == "...":
			b.WriteString(`.*?`)
		case strings.HasPrefix(v, "127.0.0.1:"):
			b.WriteString(`127\.0\.0\.1:\d+`)
		case strings.Contains(v, "T") && strings.Count(v, ":") >= 2:
			b.WriteString(`\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-][0-9:]+)`)
		case strings.Count(v, "-") == 4:
			b.WriteString(`[0-9a-f-]{36}`)
		default:
			b.WriteString(`[0-9a-f]+`)
		}
		last = loc[1]
	}
	b.WriteString(regexp.QuoteMeta(t[last:]))
	return b.String()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// column is a table column: its name and where its cells start.
type column struct {
	name  string
	start int
}

// tableHeader reads a kubectl table's header line.
func tableHeader(line string) ([]column, bool) {
	trimmed := strings.TrimRight(line, " ")
	if trimmed == "" || trimmed[0] == ' ' {
		return nil, false
	}
	var cols []column
	start := 0
	for _, sep := range append(columnSep.FindAllStringIndex(trimmed, -1), []int{len(trimmed), len(trimmed)}) {
		name := trimmed[start:sep[0]]
		if !upperCol.MatchString(name) {
			return nil, false
		}
		cols = append(cols, column{name: name, start: start})
		start = sep[1]
	}
	return cols, len(cols) >= 2
}

// cells splits a row at the header's column starts.
func cells(header []column, row string) map[string]string {
	out := map[string]string{}
	for i, c := range header {
		end := len(row)
		if i+1 < len(header) && header[i+1].start < end {
			end = header[i+1].start
		}
		if c.start >= len(row) {
			out[c.name] = ""
			continue
		}
		out[c.name] = strings.TrimSpace(row[c.start:end])
	}
	return out
}

func matchTable(want []column, wantText, got string) error {
	gotLines := strings.Split(strings.Trim(got, "\n"), "\n")
	var have []column
	var rows []string
	for i, line := range gotLines {
		h, ok := tableHeader(line)
		if ok && hasColumns(h, want) {
			have, rows = h, gotLines[i+1:]
			break
		}
	}
	if have == nil {
		names := make([]string, len(want))
		for i, c := range want {
			names[i] = c.name
		}
		return fmt.Errorf("no table with the columns %s:\n%s", strings.Join(names, ", "), got)
	}
	next := 0
	for _, row := range strings.Split(wantText, "\n")[1:] {
		if strings.TrimSpace(row) == "" {
			continue
		}
		wc := cells(want, row)
		found := false
		for ; next < len(rows) && !found; next++ {
			gc := cells(have, rows[next])
			found = true
			for _, c := range want {
				re := regexp.MustCompile("^" + pattern(strings.Fields(wc[c.name])) + "$")
				if !re.MatchString(strings.Join(strings.Fields(gc[c.name]), " ")) {
					found = false
					break
				}
			}
		}
		if !found {
			return fmt.Errorf("no row like %q (in order) in:\n%s", row, got)
		}
	}
	return nil
}

func hasColumns(have, want []column) bool {
	names := map[string]bool{}
	for _, c := range have {
		names[c.name] = true
	}
	for _, c := range want {
		if !names[c.name] {
			return false
		}
	}
	return true
}
