package cli

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Document is one manifest of a file, as policy check decides it.
type Document struct {
	// File names the source as the user gave it; "-" is stdin.
	File string
	// Index counts the file's non-empty documents from 0.
	Index int
	// Line is the document's first line of content in the file, from 1.
	Line   int
	Object map[string]any
	GVK    schema.GroupVersionKind
}

// Describe names the document for reports: "document 2: MacNodeLease
// tenant-a/build-mini".
func (d Document) Describe() string {
	return fmt.Sprintf("document %d: %s %s", d.Index, d.GVK.Kind, objectName(d.Object))
}

func objectName(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		if g, _ := meta["generateName"].(string); g != "" {
			name = g + "*"
		} else {
			name = "(unnamed)"
		}
	}
	if ns, _ := meta["namespace"].(string); ns != "" {
		return ns + "/" + name
	}
	return name
}

// ManifestError is a file or a document that cannot be read. It always
// names the file, and the document when there is one, so that a CI log
// points at the culprit.
type ManifestError struct {
	File string
	// Index is the document, from 0; -1 for the file as a whole.
	Index int
	// Line is where the document starts, from 1; 0 when unknown.
	Line int
	Err  error
}

func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Index >= 0 {
		fmt.Fprintf(&b, ": document %d", e.Index)
		if e.Line > 0 {
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ManifestError) Unwrap() error { return e.Err }

// Is makes every ManifestError an input error (exit code 2).
func (e *ManifestError) Is(target error) bool { return target == errInput }

// chunk is the text between two document separators.
type chunk struct {
	data []byte
	// line is the chunk's first line in the file, from 1.
	line int
	// err is a separator kubectl would refuse; the chunk is then empty.
	err error
}

// splitDocuments splits a YAML stream on "---" lines as kubectl does (a
// separator may carry a comment, nothing else), keeping line numbers.
func splitDocuments(data []byte) []chunk {
	var chunks []chunk
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(data); line++ {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		text := data[off:next]
		if rest, ok := bytes.CutPrefix(text, []byte("---")); ok {
			trimmed := bytes.TrimSpace(rest)
			switch {
			case len(trimmed) == 0 || trimmed[0] == '#':
				chunks = append(chunks, chunk{data: data[start:off], line: startLine})
				start, startLine = next, line+1
			case len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t'):
				chunks = append(chunks, chunk{data: data[start:off], line: startLine})
				chunks = append(chunks, chunk{line: line, err: fmt.Errorf("content after the --- separator is not supported: %q", truncate(string(trimmed), 40))})
				start, startLine = next, line+1
			}
			// Anything else ("----", "---x") is content for the parser.
		}
		off = next
	}
	return append(chunks, chunk{data: data[start:], line: startLine})
}

// contentLine is the first line of the chunk that is neither blank nor a
// comment: where a reader would say the document starts.
func (c chunk) contentLine() int {
	line := c.line
	for rest := c.data; len(rest) > 0; line++ {
		text, after, _ := bytes.Cut(rest, []byte("\n"))
		if t := bytes.TrimSpace(text); len(t) > 0 && t[0] != '#' {
			return line
		}
		rest = after
	}
	return c.line
}

// yamlLine finds the parser's line numbers, which count from the chunk.
var yamlLine = regexp.MustCompile(`\bline (\d+)\b`)

// yamlError is a parser error with its line numbers made the file's.
type yamlError struct {
	msg string
	err error
}

func (e *yamlError) Error() string { return e.msg }
func (e *yamlError) Unwrap() error { return e.err }

func newYAMLError(err error, firstLine int) error {
	msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		n, convErr := strconv.Atoi(yamlLine.FindStringSubmatch(m)[1])
		if convErr != nil {
			return m
		}
		return "line " + strconv.Itoa(n+firstLine-1)
	})
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	return &yamlError{msg: "malformed YAML: " + firstLines(msg, maxErrorLines), err: err}
}

// maxErrorLines bounds a parser message: a hostile file with a thousand
// duplicate keys would otherwise print a thousand lines.
const maxErrorLines = 5

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) <= n {
		return s
	}
	more := strings.Count(lines[n], "\n") + 1
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n  … and %d more", more)
}

// rawDocument is one decoded, non-empty document.
type rawDocument struct {
	index, line int
	value       any
}

// decodeDocuments decodes every non-empty document of a YAML or JSON
// stream. Numbers come out as the API server decodes JSON: whole numbers as
// int64. strict refuses duplicate keys, as kubectl does for manifests (one
// of two values would be checked silently); input documents, like the
// vectors, may override anchored maps with merge keys, so they are not
// strict.
func decodeDocuments(file string, data []byte, strict bool) ([]rawDocument, error) {
	toJSON := yaml.YAMLToJSON
	if strict {
		toJSON = yaml.YAMLToJSONStrict
	}
	var docs []rawDocument
	for _, c := range splitDocuments(data) {
		fail := func(err error) error {
			return &ManifestError{File: file, Index: len(docs), Line: c.contentLine(), Err: err}
		}
		if c.err != nil {
			return nil, fail(c.err)
		}
		js, err := toJSON(c.data)
		if err != nil {
			return nil, fail(newYAMLError(err, c.line))
		}
		var v any
		if err := kjson.Unmarshal(js, &v); err != nil {
			return nil, fail(fmt.Errorf("malformed document: %w", err))
		}
		if v == nil {
			continue // empty, comments only, or a bare null: kubectl skips these too
		}
		docs = append(docs, rawDocument{index: len(docs), line: c.contentLine(), value: v})
	}
	return docs, nil
}

// ReadManifests reads the Kubernetes objects in a YAML or JSON stream: one
// object per document, each with an apiVersion and a kind. file names the
// source in errors, which are *ManifestError.
func ReadManifests(file string, data []byte) ([]Document, error) {
	raws, err := decodeDocuments(file, data, true)
	if err != nil {
		return nil, err
	}
	docs := make([]Document, 0, len(raws))
	for _, r := range raws {
		fail := func(err error) error {
			return &ManifestError{File: file, Index: r.index, Line: r.line, Err: err}
		}
		obj, ok := r.value.(map[string]any)
		if !ok {
			return nil, fail(fmt.Errorf("is %s, not a Kubernetes object", describeJSON(r.value)))
		}
		apiVersion, err := stringField(obj, "apiVersion")
		if err != nil {
			return nil, fail(err)
		}
		kind, err := stringField(obj, "kind")
		if err != nil {
			return nil, fail(err)
		}
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil {
			return nil, fail(fmt.Errorf("apiVersion %q: %w", truncate(apiVersion, 80), err))
		}
		if gv.Version == "" {
			return nil, fail(fmt.Errorf("apiVersion %q has no version", truncate(apiVersion, 80)))
		}
		docs = append(docs, Document{File: file, Index: r.index, Line: r.line, Object: obj, GVK: gv.WithKind(kind)})
	}
	return docs, nil
}

func stringField(obj map[string]any, key string) (string, error) {
	v, ok := obj[key]
	if !ok || v == nil {
		return "", fmt.Errorf("the document has no %s; every manifest needs apiVersion and kind", key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s is %s, not a string", key, describeJSON(v))
	}
	if s == "" {
		return "", fmt.Errorf("%s is empty; every manifest needs apiVersion and kind", key)
	}
	return s, nil
}

// describeJSON names a decoded value's JSON type for messages.
func describeJSON(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// truncate shortens s to n runes, so that hostile input cannot flood a
// message.
func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i] + "…"
		}
		n--
	}
	return s
}

// readMap reads a file holding one YAML or JSON object (an inventory, an
// input document); empty means an empty map.
func readMap(file string, data []byte) (map[string]any, error) {
	raws, err := decodeDocuments(file, data, false)
	if err != nil {
		return nil, err
	}
	switch len(raws) {
	case 0:
		return map[string]any{}, nil
	case 1:
	default:
		return nil, &ManifestError{File: file, Index: raws[1].index, Line: raws[1].line, Err: errors.New("only one document is expected")}
	}
	m, ok := raws[0].value.(map[string]any)
	if !ok {
		return nil, &ManifestError{File: file, Index: 0, Line: raws[0].line, Err: fmt.Errorf("is %s, not an object", describeJSON(raws[0].value))}
	}
	return m, nil
}
