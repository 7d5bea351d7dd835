package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/vmspec"
	"github.com/boualleiguie/macrack-operator/internal/guest"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

// launcher is a helper launcher whose helpers are the test's: running maps
// instance UIDs to sockets, and every call is counted.
type launcher struct {
	mu      sync.Mutex
	calls   int
	running map[string]string
}

func (l *launcher) Launch(context.Context, string, vmspec.VMSpec) (string, error) {
	return "", errors.New("the sessions never launch a helper")
}

func (l *launcher) Running() (map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	return l.running, nil
}

func (l *launcher) Remove(context.Context, string) error {
	return errors.New("the sessions never remove a helper")
}

func (l *launcher) called() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

func testInstance() *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "ci-1", UID: "uid-ci-1"},
		Spec:       computev1alpha1.MacOSInstanceSpec{LeaseName: "build", ImageName: "sequoia"},
	}
}

func testGuests(t *testing.T, l *launcher) *Guests {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	img := &fleetv1alpha1.MacOSImage{ObjectMeta: metav1.ObjectMeta{Name: "sequoia"}}
	return &Guests{Launcher: l, GuestPort: guest.DefaultPort,
		Reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects([]client.Object{img}...).Build()}
}

// nopStream is a forwarded connection that carries nothing.
type nopStream struct{}

func (nopStream) Read([]byte) (int, error)    { return 0, io.EOF }
func (nopStream) Write(p []byte) (int, error) { return len(p), nil }
func (nopStream) Close() error                { return nil }

// TestAPortOutsideTCPsRangeIsRefusedBeforeAnySession: the port is checked
// before the helper is looked for, and the refusal names the range.
func TestAPortOutsideTCPsRangeIsRefusedBeforeAnySession(t *testing.T) {
	l := &launcher{running: map[string]string{}}
	g := testGuests(t, l)
	for _, port := range []int32{0, -1, 65536, 1 << 30} {
		err := g.PortForward(context.Background(), testInstance(), port, nopStream{})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d is not a TCP port: it must be within 1..65535", port)) {
			t.Errorf("port %d: %v", port, err)
		}
	}
	if n := l.called(); n != 0 {
		t.Fatalf("the helpers were looked for %d times", n)
	}
	// The control: a port in range goes on to look for the VM's helper.
	err := g.PortForward(context.Background(), testInstance(), 65535, nopStream{})
	if err == nil || !strings.Contains(err.Error(), "the VM of instance tenant-a/ci-1 has no helper running on this chassis") {
		t.Fatalf("port 65535 on a VM without a helper: %v", err)
	}
	if n := l.called(); n != 1 {
		t.Fatalf("the helpers were looked for %d times, want 1", n)
	}
}

// TestAClosedGuestPortNamesThePortAndTheVM: the guest's ErrPortClosed
// reaches the client as what it means, and stays matchable; any other
// error passes unchanged.
func TestAClosedGuestPortNamesThePortAndTheVM(t *testing.T) {
	inst := testInstance()
	err := forwardError(fmt.Errorf("forwarding in the guest: %w", guest.ErrPortClosed), 5432, inst)
	if err == nil || err.Error() != "nothing listens on port 5432 in VM tenant-a/ci-1" {
		t.Fatalf("got %v", err)
	}
	var closed *PortClosedError
	if !errors.Is(err, guest.ErrPortClosed) || !errors.As(err, &closed) || closed.Port != 5432 {
		t.Fatalf("%v does not unwrap to guest.ErrPortClosed and a *PortClosedError", err)
	}
	other := errors.New("the guest went away")
	if got := forwardError(other, 5432, inst); got != other {
		t.Fatalf("another error became %v", got)
	}
	if got := forwardError(nil, 5432, inst); got != nil {
		t.Fatalf("no error became %v", got)
	}
}
