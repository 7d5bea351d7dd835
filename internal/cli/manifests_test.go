package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const lease = "apiVersion: leasing.macrack.io/v1alpha1\nkind: MacNodeLease\nmetadata: {name: l, namespace: t}\nspec: {minimumDuration: 24h}\n"

func TestReadManifests(t *testing.T) {
	type doc struct{ index, line int }
	cases := []struct {
		name  string
		input string
		docs  []doc
		// err, when set, must appear in the error, after "f.yaml: ".
		err string
	}{
		{name: "one document is document 0 at its first line", input: lease, docs: []doc{{0, 1}}},
		{name: "a leading separator and comments do not count as a document",
			input: "# header\n---\n" + lease, docs: []doc{{0, 3}}},
		{name: "empty documents are skipped and do not shift the numbering",
			input: lease + "---\n---\n# only a comment\n---\n" + lease, docs: []doc{{0, 1}, {1, 9}}},
		{name: "a separator may carry a comment", input: lease + "--- # next\n" + lease, docs: []doc{{0, 1}, {1, 6}}},
		{name: "CRLF line endings split as LF ones do",
			input: strings.ReplaceAll(lease+"---\n"+lease, "\n", "\r\n"), docs: []doc{{0, 1}, {1, 6}}},
		{name: "a JSON manifest is one document",
			input: `{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}`, docs: []doc{{0, 1}}},
		{name: "a core apiVersion has an empty group", input: "apiVersion: v1\nkind: Pod\n", docs: []doc{{0, 1}}},

		{name: "malformed YAML names the document and the file's line",
			input: lease + "---\n" + "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n   x: b\n", err: "document 1 (line 6): malformed YAML: yaml: line 10:"},
		{name: "a duplicate key is refused as kubectl refuses it",
			input: lease + "spec: {minimumDuration: 23h}\n", err: "document 0 (line 1): malformed YAML: yaml: unmarshal errors:\n  line 5: key \"spec\" already set in map"},
		{name: "content after a separator is refused",
			input: lease + "--- {a: 1}\n", err: "document 1 (line 5): content after the --- separator"},
		{name: "a list is not a Kubernetes object", input: "- a\n- b\n", err: "document 0 (line 1): is a list, not a Kubernetes object"},
		{name: "a scalar is not a Kubernetes object", input: "just words\n", err: "document 0 (line 1): is a string, not a Kubernetes object"},
		{name: "a document without apiVersion is refused", input: "kind: Pod\n", err: "document 0 (line 1): the document has no apiVersion"},
		{name: "a document without kind is refused", input: lease + "---\napiVersion: v1\n", err: "document 1 (line 6): the document has no kind"},
		{name: "an empty kind is refused", input: "apiVersion: v1\nkind: ''\n", err: "kind is empty"},
		{name: "a kind that is not a string is refused", input: "apiVersion: v1\nkind: 3\n", err: "kind is a number, not a string"},
		{name: "an apiVersion with two slashes is refused", input: "apiVersion: a/b/c\nkind: Pod\n", err: `apiVersion "a/b/c"`},
		{name: "an apiVersion without a version is refused", input: "apiVersion: a/\nkind: Pod\n", err: "has no version"},
		{name: "a flood of duplicate keys is reported in a few lines",
			input: strings.Repeat("a: 1\n", 100), err: "line 5: key \"a\" already set in map\n  … and 95 more"},
		{name: "an infinite number is refused, as JSON has none", input: "apiVersion: v1\nkind: Pod\nx: .inf\n", err: "document 0 (line 1): malformed YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := ReadManifests("f.yaml", []byte(tc.input))
			if tc.err != "" {
				if err == nil {
					t.Fatalf("no error; want %q", tc.err)
				}
				if !strings.HasPrefix(err.Error(), "f.yaml: ") || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %q; want it to start with the file and contain %q", err, tc.err)
				}
				if !errors.Is(err, errInput) || exitCode(err) != exitInput {
					t.Errorf("error %q is not an input error (exit 2)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) != len(tc.docs) {
				t.Fatalf("%d documents, want %d", len(docs), len(tc.docs))
			}
			for i, d := range docs {
				if d.Index != tc.docs[i].index || d.Line != tc.docs[i].line || d.File != "f.yaml" || d.GVK.Kind == "" || d.GVK.Version == "" {
					t.Errorf("document %d: index %d line %d file %q gvk %v; want index %d line %d", i, d.Index, d.Line, d.File, d.GVK, tc.docs[i].index, tc.docs[i].line)
				}
			}
		})
	}
}

func TestManifestNumbersAreDecodedAsTheAPIServerDecodesJSON(t *testing.T) {
	docs, err := ReadManifests("f.yaml", []byte("apiVersion: v1\nkind: Pod\nwhole: 10\nfraction: 2.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := docs[0].Object["whole"].(int64); !ok || v != 10 {
		t.Errorf("whole is %T %v, want int64 10", docs[0].Object["whole"], docs[0].Object["whole"])
	}
	// Positive control: a fraction stays a float.
	if v, ok := docs[0].Object["fraction"].(float64); !ok || v != 2.5 {
		t.Errorf("fraction is %T %v, want float64 2.5", docs[0].Object["fraction"], docs[0].Object["fraction"])
	}
}

func TestReadManifestsSurvivesDeepNesting(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("[", 100000),
		"a: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
		strings.Repeat("- ", 5000) + "x",
	} {
		if _, err := ReadManifests("deep.yaml", []byte(s)); err == nil || !strings.HasPrefix(err.Error(), "deep.yaml: ") {
			t.Errorf("%.20q...: error %v; want one naming deep.yaml", s, err)
		}
	}
}

// FuzzReadManifests feeds policy check's reader hostile input: it must never
// panic, an error must name the file and be an input error (exit 2), and
// what it accepts must be numbered objects with an apiVersion and a kind.
func FuzzReadManifests(f *testing.F) {
	samples, err := filepath.Glob(filepath.Join(samplesDir, "*.yaml"))
	samples = append(samples, instanceSample)
	if err != nil || len(samples) == 0 {
		f.Fatalf("no samples to seed with: %v", err)
	}
	for _, s := range samples {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "---", "---\n---\n", "--- x", "---\tx\n", "----\n", "...\n",
		lease + "---\n" + lease,
		lease + "spec: {}\n",
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n   x: b\n",
		"a: [\n", "{", "[1, 2", "- a\n- b", "null", "~", "3", "\"s\"",
		"apiVersion: 1\nkind: []\n", "apiVersion: a/b/c\nkind: X\n", "apiVersion: /\nkind: X\n",
		"x: &a [*a]\n", "a: &a {b: *a}\n",
		"a: &x [1,1,1,1]\nb: &y [*x,*x,*x,*x]\nc: &z [*y,*y,*y,*y]\n",
		"\ufeffapiVersion: v1\nkind: Pod\n", "apiVersion: v1\x00\nkind: Pod\n", "\xff\xfe",
		"? [a, b]\n: c\n", "!!binary aGk=\n", "x: 1e999\n", "x: 0x1F\n", "x: .inf\n",
		"\t- a\n", "apiVersion: v1\r\nkind: Pod\r\n---\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "hostile.yaml"
		start := time.Now()
		docs, err := ReadManifests(name, data)
		// Hostile input must not stall CI either; the bound is generous, as
		// the fuzzer's inputs are small and the machine may be busy.
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%d bytes took %v", len(data), d)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("the error does not start with the file name: %q", err)
			}
			var me *ManifestError
			if !errors.As(err, &me) || !errors.Is(err, errInput) {
				t.Fatalf("the error is not a ManifestError and an input error: %#v", err)
			}
			if docs != nil {
				t.Fatalf("documents %v returned with the error %q", docs, err)
			}
			return
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for i, d := range docs {
			if d.Index != i || d.File != name {
				t.Fatalf("document %d has index %d, file %q", i, d.Index, d.File)
			}
			if d.Line < 1 || d.Line > lines || (i > 0 && d.Line <= docs[i-1].Line) {
				t.Fatalf("document %d starts at line %d of %d (the previous at %d)", i, d.Line, lines, docs[max(i-1, 0)].Line)
			}
			if d.GVK.Kind == "" || d.GVK.Version == "" || d.Object == nil {
				t.Fatalf("document %d lacks a kind, a version or an object: %v", i, d.GVK)
			}
		}
	})
}
