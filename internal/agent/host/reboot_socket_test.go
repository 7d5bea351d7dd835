package host

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

func TestRequestRebootConnectsAndKeepsShutdownsStdoutOpen(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "reboot.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var mu sync.Mutex
	var logged []string
	drained := make(chan struct{})
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		logged = append(logged, args)
		mu.Unlock()
		close(drained)
	}, funcr.Options{})

	if err := requestReboot(context.Background(), sock, log); err != nil {
		t.Fatal(err)
	}
	// launchd's side: the job writes to the connection after the agent
	// has its answer, as shutdown does; the agent must still be reading.
	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	for _, line := range []string{"Shutdown NOW!\n", "shutdown: [pid 812]\n", "\r\nSystem shutdown time has arrived\a\a\r\n"} {
		if _, err := conn.Write([]byte(line)); err != nil {
			t.Fatalf("the agent closed shutdown's stdout: %v", err)
		}
	}
	conn.Close()
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection was not drained")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || !strings.Contains(logged[0], "Shutdown NOW!") {
		t.Fatalf("logged %q", logged)
	}
}

func TestRequestRebootWithoutTheDaemonSaysToInstallIt(t *testing.T) {
	err := requestReboot(context.Background(), filepath.Join(t.TempDir(), "reboot.sock"), funcr.New(func(string, string) {}, funcr.Options{}))
	if err == nil || !strings.Contains(err.Error(), RebootDaemonLabel) {
		t.Fatalf("got %v", err)
	}
}
