package natsserver

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// serverProcAttr: a server has its own process group, and the kernel kills
// it when the test binary dies, of a timeout's SIGKILL too.
func serverProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// stopped waits until the kernel reports pid stopped ('T' in
// /proc/<pid>/stat). SIGSTOP is delivered asynchronously: without the wait
// a "paused" server can still answer a request or two.
func stopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The state follows the command's closing parenthesis.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after %s", pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
