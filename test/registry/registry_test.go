package registry

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func get(t *testing.T, host string) (int, error) {
	t.Helper()
	resp, err := http.Get("http://" + host + "/v2/")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestStartRestartStop(t *testing.T) {
	s := StartT(t)
	host := s.Host()
	if !strings.HasPrefix(host, "127.0.0.1:") || strings.HasSuffix(host, ":0") {
		t.Fatalf("Host() = %q, want 127.0.0.1:<port>", host)
	}
	if code, err := get(t, host); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v2/: %d, %v", code, err)
	}
	s.Stop()
	if _, err := get(t, host); err == nil {
		t.Fatalf("GET /v2/ answered after Stop")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.Host() != host {
		t.Fatalf("Restart moved the registry from %s to %s", host, s.Host())
	}
	if code, err := get(t, host); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v2/ after Restart: %d, %v", code, err)
	}
	s.Stop()
	s.Stop() // twice is fine
}

func TestAMissingBinarySaysMakeRegistry(t *testing.T) {
	t.Setenv(EnvBinary, filepath.Join(t.TempDir(), "no-such-registry"))
	_, err := Start(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make registry") {
		t.Fatalf("Start with a missing binary: %v, want an error saying to run make registry", err)
	}
}
