// Command bundle writes MacRack's OLM bundle (registry+v1) from config/:
// `make bundle` runs it into bundle/, and `make check-bundle` into a
// temporary folder that must equal the committed bundle/.
//
// Everything comes from the kustomize tree a plain install applies, so that
// the two installs cannot drift apart:
//   - the CRDs of config/crd (every file of config/crd/bases), copied as they are;
//   - the operator's RBAC, exactly as narrow as config/rbac: the rules of every
//     ClusterRole bound to the operator's ServiceAccount become the CSV's
//     clusterPermissions, those of every Role bound to it in its namespace the
//     CSV's permissions (OLM grants them in the namespace it installs into);
//     the other ClusterRoles (the tenants' and the agents') ship as they are;
//   - the webhooks of config/webhook/manifests.yaml, as webhookdefinitions
//     (OLM creates the Service and the serving certificate);
//   - the Deployment of config/manager/manager.yaml, with --image;
//   - the samples of config/samples, as the alm-examples annotation.
//
// The ValidatingAdmissionPolicies of config/policies cannot ride in a bundle:
// the operator applies them itself at start-up (internal/admission
// PolicyApplier), which the CSV's description says.
//
// The output is byte-for-byte deterministic: no timestamp, no map order.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	var o options
	flag.StringVar(&o.root, "root", ".", "the project's root (the folder that holds config/)")
	flag.StringVar(&o.out, "out", "bundle", "the bundle folder to write; its manifests/ and metadata/ are replaced")
	flag.StringVar(&o.version, "version", "", "the operator's version, semver without a v (required)")
	flag.StringVar(&o.image, "image", "", "the operator image the CSV deploys (required)")
	flag.StringVar(&o.channels, "channels", "candidate", "the bundle's channels, comma-separated")
	flag.StringVar(&o.defaultChannel, "default-channel", "candidate", "the package's default channel")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
}

type options struct {
	root, out                string
	version, image           string
	channels, defaultChannel string
}

func run(o options) error {
	if o.version == "" || o.image == "" {
		return fmt.Errorf("--version and --image are required")
	}
	in, err := load(o.root)
	if err != nil {
		return err
	}
	b, err := build(in, o)
	if err != nil {
		return err
	}
	return b.write(filepath.Clean(o.out))
}
