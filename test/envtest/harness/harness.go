// Package harness starts a real kube-apiserver and etcd (from bin/k8s, built
// by hack/controlplane) with every MacRack CRD installed, for the envtest
// suites.
package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

// ErrNoControlPlane means bin/k8s holds no kube-apiserver or etcd.
var ErrNoControlPlane = errors.New("control plane binaries missing: run 'make controlplane'")

// RepoRoot is the directory of the main module's go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	// test/envtest/harness/harness.go -> repository root
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Scheme registers the core kinds and every MacRack kind.
func Scheme() (*k8sruntime.Scheme, error) { return macrackscheme.New() }

// Env is a running control plane with the CRDs installed.
type Env struct {
	Environment *envtest.Environment
	Config      *rest.Config
	Client      client.Client
	Scheme      *k8sruntime.Scheme

	controllerManagers []*ControllerManager
	operatorProcesses  []*OperatorProcess
	// images is the suite's golden store; resolving says whether an
	// operator that resolves MacOSImages runs.
	images    *imageStore
	resolving bool
}

// Start boots kube-apiserver and etcd and installs every CRD under
// config/crd/bases. Customize may adjust the environment before it starts.
func Start(customize ...func(*envtest.Environment)) (*Env, error) {
	root := RepoRoot()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%w (looked in %s)", ErrNoControlPlane, assets)
		}
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
		Scheme:                scheme,
	}
	for _, c := range customize {
		c(env)
	}
	cfg, err := env.Start()
	if err != nil {
		// Start leaves the processes running when a later step (CRD install)
		// fails; stop them so that no orphan outlives the suite.
		_ = env.Stop()
		return nil, fmt.Errorf("starting control plane from %s: %w", assets, err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{Environment: env, Config: cfg, Client: cl, Scheme: scheme}, nil
}

// Stop stops every kube-controller-manager StartControllerManager started
// and every operator StartOperatorProcess started, then the control plane.
// An operator process the suite stopped or killed already is no error.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil {
		return nil
	}
	var errs []error
	for _, cm := range e.controllerManagers {
		errs = append(errs, cm.Stop())
	}
	for _, p := range e.operatorProcesses {
		_ = p.Stop()
	}
	if e.images != nil {
		e.images.stop()
	}
	errs = append(errs, e.Environment.Stop())
	return errors.Join(errs...)
}

// CRDNames lists the names of the CRDs the harness installed.
func (e *Env) CRDNames() []string {
	names := make([]string, 0, len(e.Environment.CRDs))
	for _, crd := range e.Environment.CRDs {
		names = append(names, crd.Name)
	}
	return names
}

// WatchClient returns a client that can watch, as the administrator.
func (e *Env) WatchClient() client.WithWatch {
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: e.Scheme})
	if err != nil {
		panic(err)
	}
	return c
}

// AdminKubeconfig writes a kubeconfig of a cluster administrator
// (system:masters) into dir, for the command-line tools a suite runs as an
// administrator would, and returns its path.
func (e *Env) AdminKubeconfig(dir string) (string, error) {
	user, err := e.Environment.ControlPlane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding an administrator: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// KubeconfigAs writes a kubeconfig of user in groups, authenticated by a
// client certificate of the API server's client CA (no impersonation),
// into dir, for the command-line tools a suite runs as that user, and
// returns its path.
func (e *Env) KubeconfigAs(dir, user string, groups ...string) (string, error) {
	u, err := e.Environment.ControlPlane.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", user, err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, user+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
