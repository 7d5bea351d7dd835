package vmspec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadOrCreateMachineIdentifier(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, MachineIdentifierFile)
	calls := 0
	gen := func() ([]byte, error) { calls++; return []byte{byte(calls)}, nil }

	first, err := LoadOrCreateMachineIdentifier(path, gen)
	if err != nil {
		t.Fatal(err)
	}
	second, err := LoadOrCreateMachineIdentifier(path, gen)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || string(first) != string(second) {
		t.Fatalf("the identifier changed across loads: %v then %v after %d generations", first, second, calls)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("a temporary file was left behind: %v", entries)
	}
}

func TestLoadOrCreateMachineIdentifierFailures(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(path string) error
		gen     func() ([]byte, error)
		want    error
	}{
		{"an empty persisted identifier is not silently replaced",
			func(path string) error { return os.WriteFile(path, nil, 0o600) },
			func() ([]byte, error) { return []byte{1}, nil }, ErrMachineIdentifier},
		{"a generator that returns nothing is refused",
			func(string) error { return nil },
			func() ([]byte, error) { return nil, nil }, ErrMachineIdentifier},
		{"a generator's error is passed on",
			func(string) error { return nil },
			func() ([]byte, error) { return nil, errBoom }, errBoom},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), MachineIdentifierFile)
			if err := c.prepare(path); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadOrCreateMachineIdentifier(path, c.gen); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

var errBoom = errors.New("boom")
