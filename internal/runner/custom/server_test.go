package custom

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTheSocketIsInADirectoryOnlyItsUserReaches(t *testing.T) {
	s := newServer(t, newBashVM(t))
	fi, err := os.Stat(filepath.Dir(s.Socket()))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(s.Socket())); !os.IsNotExist(err) {
		t.Fatalf("the directory outlived Close: %v", err)
	}
}

func TestPeerUIDNamesThisProcesssUser(t *testing.T) {
	s := newServer(t, newBashVM(t))
	lis, err := net.Listen("unix", filepath.Join(filepath.Dir(s.Socket()), "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		if c, err := net.Dial("unix", lis.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(time.Second)
		}
	}()
	c, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	uid, err := peerUID(c.(*net.UnixConn))
	if err != nil || uid != os.Getuid() {
		t.Fatalf("uid %d, %v", uid, err)
	}
}

func TestAnotherUsersConnectionIsDropped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		uid    int
		answer bool
	}{
		{"a peer of another uid gets no answer", os.Getuid() + 1, false},
		{"positive control: a peer of the same uid is served", os.Getuid(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewStageServer(newBashVM(t), ServerOptions{peerUID: func(*net.UnixConn) (int, error) { return tc.uid, nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			err = newClient(s.Socket()).probe(ctx)
			if (err == nil) != tc.answer {
				t.Fatalf("probe: %v", err)
			}
		})
	}
}

func TestTheServerRefusesBadRunRequests(t *testing.T) {
	vm := newBashVM(t)
	s := newServer(t, vm)
	c := newClient(s.Socket())
	post := func(stage string, body io.Reader, size int64) int {
		t.Helper()
		resp, err := c.do(context.Background(), http.MethodPost, pathRun, body, size, stage)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := post("", strings.NewReader("true\n"), 5); code != http.StatusBadRequest {
		t.Fatalf("no stage: %d", code)
	}
	if code := post("build_script", strings.NewReader(""), 0); code != http.StatusBadRequest {
		t.Fatalf("empty script: %d", code)
	}
	big := strings.Repeat("#", MaxScriptBytes+1)
	if code := post("build_script", strings.NewReader(big), int64(len(big))); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("too large: %d", code)
	}
	if n := len(vm.got()); n != 0 {
		t.Fatalf("the VM ran %d refused scripts", n)
	}
	// Positive control: a good request runs.
	if code := post("build_script", strings.NewReader("true\n"), 5); code != http.StatusOK || len(vm.got()) != 1 {
		t.Fatalf("good request: %d, %d scripts", code, len(vm.got()))
	}
}

func TestCloseEndsARunningScript(t *testing.T) {
	vm := newBashVM(t)
	s := newServer(t, vm)
	done := make(chan error, 1)
	go func() {
		_, err := newClient(s.Socket()).run(context.Background(), "build_script", strings.NewReader("sleep 60\n"), 9, io.Discard)
		done <- err
	}()
	for deadline := time.Now().Add(waitLimit); len(vm.got()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the script never started")
		}
	}
	began := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || time.Since(began) > waitLimit || vm.canceledRuns() != 1 {
		t.Fatalf("run: %v after %s, %d canceled", err, time.Since(began), vm.canceledRuns())
	}
}
