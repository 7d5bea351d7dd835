package main

import (
	"flag"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boualleiguie/macrack-operator/internal/mdm"
)

// managedSettings fills the flags the command line left unset from the
// chassis' managed preferences at path (deploy/macos's LaunchDaemon is the
// same on every Mac; the chassis' profile makes it this chassis' agent),
// and returns the bootstrap kubeconfig unless --kubeconfig was given.
func managedSettings(fs *flag.FlagSet, path string) ([]byte, error) {
	s, err := mdm.ReadManagedPreferences(path)
	if err != nil {
		return nil, fmt.Errorf("--managed-preferences %s: %w", path, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, value := range map[string]string{"serial": s.Serial, "agents-namespace": s.AgentsNamespace} {
		if given[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return nil, fmt.Errorf("--managed-preferences %s: --%s: %w", path, name, err)
		}
	}
	if given["kubeconfig"] {
		return nil, nil
	}
	return []byte(s.BootstrapKubeconfig), nil
}

// restConfig is the agent's client configuration: from the kubeconfig's
// content when its managed preferences carry it, else from the file.
func restConfig(path string, data []byte) (*rest.Config, error) {
	if data != nil {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			return nil, fmt.Errorf("the bootstrap kubeconfig of the managed preferences: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	return cfg, nil
}
