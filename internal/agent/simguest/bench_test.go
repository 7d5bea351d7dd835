package simguest

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/boualleiguie/macrack-operator/internal/agent/helper"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/guest"
)

// BenchmarkForwardThroughAHelper is a port forward's whole path in one
// process: a loopback TCP client, Session.Forward's SSH channel, a real
// helper.Server's Unix socket and proxy, the sim driver's guest stream,
// the guest agent's SSH server, and the sim loopback's discard port.
func BenchmarkForwardThroughAHelper(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := simHost(ctx)
	dir, err := os.MkdirTemp("", "mrb")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	spec := benchSpec(dir)
	srv, err := helper.NewServer(d, spec)
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "h.sock")
	ln, err := helper.Listen(sock)
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	sctx, stopServe := context.WithCancel(ctx)
	go func() { served <- srv.Serve(sctx, ln) }()
	defer func() {
		stopServe()
		<-served
	}()
	hc, err := helper.Dial(ctx, sock)
	if err != nil {
		b.Fatal(err)
	}
	defer hc.Close()
	if err := hc.Start(ctx, spec); err != nil {
		b.Fatal(err)
	}
	defer srv.VM().Stop(context.Background(), 0)
	conn, err := hc.DialGuest(ctx, guest.DefaultPort)
	if err != nil {
		b.Fatal(err)
	}
	s, err := guest.NewClient(conn).Session(ctx, "admin")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	local, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Forward(ctx, PortDiscard, local) }()

	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for range b.N {
		if _, err := client.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	client.(*net.TCPConn).CloseWrite()
	if _, err := io.Copy(io.Discard, client); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// benchSpec is a sim VM's spec whose disk lives in dir.
func benchSpec(dir string) vmspec.VMSpec {
	return vmspec.VMSpec{
		Name: "tenant-a/bench", UID: "uid-bench", CPUCount: 4, MemoryBytes: 8 << 30,
		DiskPath: filepath.Join(dir, "disk.img"), DiskBytes: 200 << 30,
		BootLoader: vmspec.BootLoaderMacOS, HardwareModel: []byte("model"), MachineIdentifier: []byte("id"),
		AuxiliaryStoragePath: filepath.Join(dir, "aux.img"), Network: vmspec.NetworkNAT,
		MACAddress: vmspec.MACAddress("uid-bench").String(), Vsock: true, Display: vmspec.DefaultDisplay(),
	}
}
