package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
	"github.com/boualleiguie/macrack-operator/internal/mdm"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

const nodeUsage = `Manage chassis.

Usage:
  macrackctl node enroll <serial> --class CLASS [flags]
  macrackctl node retire <serial> [flags]

Commands:
  enroll   record a chassis: its MacNode and its agent's ServiceAccount, and
           print a bootstrap kubeconfig, with a time-bound token, for the MDM
           payload that installs the host agent
  retire   take a dead chassis out of service for good: it is never leased
           again, and the disks its agent can no longer wipe are recorded in
           its status.unwipedDisks
`

const retireUsage = `Take a chassis out of service for good. This cannot be undone.

A retired chassis is never leased again. Its current lease, if any, keeps it
until earliestReleaseAt as always; the operator then lets the lease's
instances go without waiting for a wipe that a dead Mac cannot do, and records
each unwiped disk in the MacNode's status.unwipedDisks. Destroy its SSD.

Usage:
  macrackctl node retire <serial> [flags]

Flags:
  --kubeconfig FILE   the administrator's kubeconfig (default: $KUBECONFIG,
                      then ~/.kube/config)

Exit codes: 0 retired; 2 bad arguments or the cluster refused.
`

const enrollUsage = `Record a chassis and print its agent's bootstrap kubeconfig.

Usage:
  macrackctl node enroll <serial> --class CLASS [flags]

Flags:
  --class CLASS              the MacNodeClass (required)
  --address IP               the chassis' IP address, where the API server reaches
                             its agent for kubectl exec and logs; the operator
                             publishes it as the Node's only address
  --agents-namespace NS      the agents' namespace (default macrack-agents)
  --token-ttl DURATION       the bootstrap token's lifetime (default 24h); the
                             agent renews its own token afterwards
  --kubeconfig FILE          the administrator's kubeconfig (default: $KUBECONFIG,
                             then ~/.kube/config)
  -o, --out FILE             write the kubeconfig to FILE (mode 0600) instead of stdout
  --profile FILE             write the chassis' configuration profile (.mobileconfig,
                             mode 0600) to FILE: the agent's settings with the
                             bootstrap kubeconfig as managed preferences, and
                             software updates that never install or restart on
                             their own. Upload it to your MDM for this Mac alone
                             (docs/mdm.md). With --profile and no -o, no
                             kubeconfig is printed

Exit codes: 0 enrolled; 2 bad arguments or the cluster refused.
`

func runNode(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprint(e.stdout, nodeUsage)
		if len(args) == 0 {
			return usagef("node", "no subcommand given")
		}
		return errHelp
	}
	switch args[0] {
	case "enroll":
		return runEnroll(ctx, e, args[1:])
	case "retire":
		return runRetire(ctx, e, args[1:])
	}
	return usagef("node", "unknown subcommand %q", args[0])
}

func runRetire(ctx context.Context, e env, args []string) error {
	fs := newFlagSet("node retire")
	kubeconfig := fs.String("kubeconfig", "", "")
	pos, err := parseFlags(fs, "node retire", args, e.stdout, retireUsage)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("node retire", "want exactly one serial, got %d arguments", len(pos))
	}
	c, _, err := adminClient(*kubeconfig)
	if err != nil {
		return err
	}
	name := enroll.NodeName(pos[0])
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Patch(ctx, mn, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"retired":true}}`))); err != nil {
		return fmt.Errorf("%w: retiring %s: %w", errInput, pos[0], err)
	}
	fmt.Fprintf(e.stdout, "retired %s (MacNode %s); it is never leased again\n", pos[0], name)
	return nil
}

// adminClient connects with the administrator's kubeconfig.
func adminClient(kubeconfig string) (client.Client, *rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: loading the kubeconfig: %w", errInput, err)
	}
	scheme, err := macrackscheme.New()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: connecting: %w", errInput, err)
	}
	return c, cfg, nil
}

func runEnroll(ctx context.Context, e env, args []string) error {
	fs := newFlagSet("node enroll")
	class := fs.String("class", "", "")
	address := fs.String("address", "", "")
	ns := fs.String("agents-namespace", "macrack-agents", "")
	ttl := fs.Duration("token-ttl", 24*time.Hour, "")
	kubeconfig := fs.String("kubeconfig", "", "")
	out := fs.String("out", "", "")
	fs.StringVar(out, "o", "", "")
	profile := fs.String("profile", "", "")
	pos, err := parseFlags(fs, "node enroll", args, e.stdout, enrollUsage)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("node enroll", "want exactly one serial, got %d arguments", len(pos))
	}
	if *class == "" {
		return usagef("node enroll", "--class is required")
	}
	c, cfg, err := adminClient(*kubeconfig)
	if err != nil {
		return err
	}
	kc, err := enroll.Enroll(ctx, c, cfg, enroll.Options{Serial: pos[0], Class: *class, Address: *address, AgentsNamespace: *ns, TokenTTL: *ttl})
	if err != nil {
		return fmt.Errorf("%w: enrolling %s: %w", errInput, pos[0], err)
	}
	enrolled := fmt.Sprintf("enrolled %s (MacNode %s, ServiceAccount %s/agent-%s)",
		pos[0], enroll.NodeName(pos[0]), *ns, enroll.NodeName(pos[0]))
	if *profile != "" {
		doc, err := mdm.Profile(mdm.Settings{Serial: pos[0], AgentsNamespace: *ns, BootstrapKubeconfig: string(kc)}, mdm.NewPayloadUUID)
		if err != nil {
			return fmt.Errorf("%w: the profile of %s: %w", errInput, pos[0], err)
		}
		if err := writePrivate(*profile, doc); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "%s; configuration profile %s written to %s\n", enrolled, mdm.ProfileIdentifier(pos[0]), *profile)
		if *out == "" {
			return nil
		}
	}
	if *out == "" {
		_, err = e.stdout.Write(kc)
		return err
	}
	if err := writePrivate(*out, kc); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%s; bootstrap kubeconfig written to %s\n", enrolled, *out)
	return nil
}

// writePrivate writes a file that holds a token: mode 0600, even over an
// existing file that had another.
func writePrivate(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	return nil
}
