package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/boualleiguie/macrack-operator/internal/enroll"
	macrackscheme "github.com/boualleiguie/macrack-operator/internal/scheme"
)

const nodeUsage = `Manage chassis.

Usage:
  macrackctl node enroll <serial> --class CLASS [flags]

Commands:
  enroll   record a chassis: its MacNode and its agent's ServiceAccount, and
           print a bootstrap kubeconfig, with a time-bound token, for the MDM
           payload that installs the host agent
`

const enrollUsage = `Record a chassis and print its agent's bootstrap kubeconfig.

Usage:
  macrackctl node enroll <serial> --class CLASS [flags]

Flags:
  --class CLASS              the MacNodeClass (required)
  --agents-namespace NS      the agents' namespace (default macrack-agents)
  --token-ttl DURATION       the bootstrap token's lifetime (default 24h); the
                             agent renews its own token afterwards
  --kubeconfig FILE          the administrator's kubeconfig (default: $KUBECONFIG,
                             then ~/.kube/config)
  -o, --out FILE             write the kubeconfig to FILE (mode 0600) instead of stdout

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
	if args[0] != "enroll" {
		return usagef("node", "unknown subcommand %q", args[0])
	}
	fs := newFlagSet("node enroll")
	class := fs.String("class", "", "")
	ns := fs.String("agents-namespace", "macrack-agents", "")
	ttl := fs.Duration("token-ttl", 24*time.Hour, "")
	kubeconfig := fs.String("kubeconfig", "", "")
	out := fs.String("out", "", "")
	fs.StringVar(out, "o", "", "")
	pos, err := parseFlags(fs, "node enroll", args[1:], e.stdout, enrollUsage)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("node enroll", "want exactly one serial, got %d arguments", len(pos))
	}
	if *class == "" {
		return usagef("node enroll", "--class is required")
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("%w: loading the kubeconfig: %w", errInput, err)
	}
	scheme, err := macrackscheme.New()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("%w: connecting: %w", errInput, err)
	}
	kc, err := enroll.Enroll(ctx, c, cfg, enroll.Options{Serial: pos[0], Class: *class, AgentsNamespace: *ns, TokenTTL: *ttl})
	if err != nil {
		return fmt.Errorf("%w: enrolling %s: %w", errInput, pos[0], err)
	}
	if *out == "" {
		_, err = e.stdout.Write(kc)
		return err
	}
	if err := os.WriteFile(*out, kc, 0o600); err != nil {
		return fmt.Errorf("%w: %w", errInput, err)
	}
	fmt.Fprintf(e.stderr, "enrolled %s (MacNode %s, ServiceAccount %s/agent-%s); bootstrap kubeconfig written to %s\n",
		pos[0], enroll.NodeName(pos[0]), *ns, enroll.NodeName(pos[0]), *out)
	return nil
}
