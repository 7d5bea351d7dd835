package kubelet

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	computev1alpha1 "github.com/boualleiguie/macrack-operator/api/compute/v1alpha1"
	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

const (
	node   = "mini1"
	tenant = "tenant-a"
	// vmA runs on node, in a slot; vmS holds a slot, but is Stopped.
	vmA, uidA = "vm-a", types.UID("uid-a")
	vmS, uidS = "vm-s", types.UID("uid-s")
)

// knobs describe the test world: one instance (vm-a) and node's MacNode.
type knobs struct {
	instNode    string
	phase       computev1alpha1.VMPhase
	noRuntime   bool
	deleting    bool
	noMacNode   bool
	slotUID     types.UID
	slotName    string
	nodePhase   fleetv1alpha1.MacNodePhase
	quarantine  *fleetv1alpha1.QuarantineStatus
	condition   metav1.ConditionStatus
	extraSlots  []fleetv1alpha1.Slot
	extraObject []client.Object
}

func baseKnobs() knobs {
	return knobs{instNode: node, phase: computev1alpha1.VMRunning, slotUID: uidA, slotName: vmA, nodePhase: fleetv1alpha1.MacNodeLeased}
}

func instance(name string, uid types.UID, nodeName string, phase computev1alpha1.VMPhase) *computev1alpha1.MacOSInstance {
	return &computev1alpha1.MacOSInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: name, UID: uid},
		Spec:       computev1alpha1.MacOSInstanceSpec{LeaseName: "lease", ImageName: "sequoia"},
		Status: computev1alpha1.MacOSInstanceStatus{
			NodeName: nodeName,
			Runtime:  &computev1alpha1.RuntimeStatus{Phase: phase},
		},
	}
}

func (k knobs) objects() []client.Object {
	inst := instance(vmA, uidA, k.instNode, k.phase)
	if k.noRuntime {
		inst.Status.Runtime = nil
	}
	if k.deleting {
		now := metav1.Now()
		inst.DeletionTimestamp = &now
		inst.Finalizers = []string{fleetv1alpha1.DiskWipeFinalizer}
	}
	objs := []client.Object{inst}
	if !k.noMacNode {
		mn := &fleetv1alpha1.MacNode{
			ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec:       fleetv1alpha1.MacNodeSpec{Serial: strings.ToUpper(node) + "XXXX", NodeClassName: "m4"},
			Status: fleetv1alpha1.MacNodeStatus{
				Phase:      k.nodePhase,
				Slots:      append([]fleetv1alpha1.Slot{{Namespace: tenant, Name: k.slotName, UID: k.slotUID}}, k.extraSlots...),
				Quarantine: k.quarantine,
			},
		}
		if k.condition != "" {
			mn.Status.Conditions = []metav1.Condition{{Type: fleetv1alpha1.ConditionQuarantined, Status: k.condition,
				Reason: fleetv1alpha1.ReasonStoppingVMs, LastTransitionTime: metav1.Now()}}
		}
		objs = append(objs, mn)
	}
	return append(objs, k.extraObject...)
}

func (k knobs) reader(t *testing.T) client.Reader {
	t.Helper()
	scheme, err := macrackscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(k.objects()...).Build()
}

// serverWorld is the world of the HTTP tests: vm-a Running and vm-s
// Stopped, both in node's slots.
func serverWorld() knobs {
	k := baseKnobs()
	k.extraSlots = []fleetv1alpha1.Slot{{Namespace: tenant, Name: vmS, UID: uidS}}
	k.extraObject = []client.Object{instance(vmS, uidS, node, computev1alpha1.VMStopped)}
	return k
}

// Tokens of the fake authenticator, and what the fake authorizer lets each do.
const (
	adminToken  = "admin-token"  // create and get on nodes/proxy
	getterToken = "getter-token" // get only
)

// fakeAuthn authenticates bearer tokens only: a token is its user's name
// with "-token" after it.
type fakeAuthn struct{}

func (fakeAuthn) AuthenticateRequest(r *http.Request) (*authenticator.Response, bool, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false, nil
	}
	name, ok := strings.CutSuffix(tok, "-token")
	if !ok {
		return nil, false, fmt.Errorf("invalid bearer token")
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
}

// fakeAuthz lets admin create and get nodes/proxy on node, and getter get.
type fakeAuthz struct {
	mu   sync.Mutex
	seen []authorizer.Attributes
}

func (f *fakeAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.mu.Lock()
	f.seen = append(f.seen, a)
	f.mu.Unlock()
	verbs := map[string][]string{"admin": {"create", "get"}, "getter": {"get"}}[a.GetUser().GetName()]
	if a.GetResource() == "nodes" && a.GetName() == node && a.GetSubresource() == "proxy" && slices.Contains(verbs, a.GetVerb()) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "not in the test's table", nil
}

// fakeGuests runs the test's functions, and counts the calls.
type fakeGuests struct {
	mu    sync.Mutex
	calls int
	exec  func(ctx context.Context, inst *computev1alpha1.MacOSInstance, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error
	logs  func(ctx context.Context, inst *computev1alpha1.MacOSInstance, o LogOptions, w io.Writer) error
	fwd   func(ctx context.Context, inst *computev1alpha1.MacOSInstance, port int32, stream io.ReadWriteCloser) error
}

func (g *fakeGuests) Exec(ctx context.Context, inst *computev1alpha1.MacOSInstance, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	if g.exec == nil {
		return fmt.Errorf("no exec in this test")
	}
	return g.exec(ctx, inst, cmd, in, out, errOut, tty, resize)
}

func (g *fakeGuests) Logs(ctx context.Context, inst *computev1alpha1.MacOSInstance, o LogOptions, w io.Writer) error {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	if g.logs == nil {
		return fmt.Errorf("no logs in this test")
	}
	return g.logs(ctx, inst, o, w)
}

func (g *fakeGuests) PortForward(ctx context.Context, inst *computev1alpha1.MacOSInstance, port int32, stream io.ReadWriteCloser) error {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	if g.fwd == nil {
		return fmt.Errorf("no port-forward in this test")
	}
	return g.fwd(ctx, inst, port, stream)
}

func (g *fakeGuests) called() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// logLines collects a logger's lines. Streaming handlers may log after a
// test ends, where t.Log would panic.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// testServer serves the handler of a Server with the fake authentication
// and authorization, CacheResolver on serverWorld, and g, over TLS.
type testServer struct {
	*httptest.Server
	authz *fakeAuthz
	log   *logLines
}

func newTestServer(t *testing.T, g Guests) *testServer {
	t.Helper()
	ts := &testServer{authz: &fakeAuthz{}, log: &logLines{}}
	s := &Server{
		NodeName:      node,
		Authenticator: fakeAuthn{},
		Authorizer:    ts.authz,
		Resolver:      CacheResolver{Reader: serverWorld().reader(t), NodeName: node},
		Guests:        g,
		Log:           ts.log.logger(),
	}
	h, err := s.Handler()
	if err != nil {
		t.Fatal(err)
	}
	ts.Server = httptest.NewUnstartedServer(h)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", ts.log)
		}
	})
	return ts
}

// restConfig is a client's configuration for the test server, with token
// as its bearer token (none if empty).
func (ts *testServer) restConfig(token string) *rest.Config {
	return &rest.Config{
		Host:        ts.URL,
		BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}),
		},
	}
}

// get GETs path with token.
func (ts *testServer) get(t *testing.T, ctx context.Context, path, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
