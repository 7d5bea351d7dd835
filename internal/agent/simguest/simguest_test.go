package simguest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boualleiguie/macrack-operator/internal/guest"
)

func TestTheHostReadsTheSimGuestThroughTheRealProtocol(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := Handler(ctx, Reporter{XcodeVersions: []string{"16.4"}, HeadroomBytes: 50 << 30, Clock: clocktesting.NewFakeClock(time.Now())}, logr.Discard())
	host, g := net.Pipe()
	handled := make(chan struct{})
	go func() { h(ctx, guest.DefaultPort, g); close(handled) }()
	c := guest.NewClient(host)
	defer c.Close()
	rep, err := c.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.BootStage != "ready" || !rep.ReadyForWork || len(rep.XcodeVersions) != 1 || rep.DiskHeadroomBytes != 50<<30 {
		t.Fatalf("unexpected report %+v", rep)
	}
	select {
	case <-handled:
		t.Fatal("the handler returned while the host still talked to the guest")
	default:
	}
	c.Close()
	<-handled // once the host hangs up, the server closes its end and the handler returns
	other, g2 := net.Pipe()
	h(ctx, 4242, g2)
	if _, err := guest.NewClient(other).Report(ctx); err == nil {
		t.Fatal("a port the guest agent does not listen on answered")
	}
}
