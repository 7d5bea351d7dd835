package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/enroll"
)

const simUsage = `Inject faults into a simulated fleet (make run). Real Macs ignore them.

Usage:
  macrackctl sim quota-stick <serial> [flags]

Commands:
  quota-stick   reproduce the kernel's stuck VM quota on a sim chassis: its
                kernel keeps a VM counted after it stops, and its agent tries a
                start at once, which fails with VZErrorDomain code 6. Watch the
                quarantine loop with: kubectl get mn -w
`

const quotaStickUsage = `Make a sim chassis' kernel VM quota stick.

The sim agent fills its kernel's VM counter with VMs that are no longer
running, as the macOS bug does, and tries a start: the kernel refuses it with
VZErrorDomain code 6 while fewer than two VMs run. The operator then
quarantines the chassis, its VMs stop gracefully, the sim host reboots, and the
chassis goes back to the same lease. Only the sim agent honours this; the
quota itself is never raised.

Usage:
  macrackctl sim quota-stick <serial> [flags]

Flags:
  --kubeconfig FILE   the administrator's kubeconfig (default: $KUBECONFIG,
                      then ~/.kube/config)

Exit codes: 0 asked; 2 bad arguments or the cluster refused.
`

func runSim(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		fmt.Fprint(e.stdout, simUsage)
		if len(args) == 0 {
			return usagef("sim", "no subcommand given")
		}
		return errHelp
	}
	if args[0] == "quota-stick" {
		return runQuotaStick(ctx, e, args[1:])
	}
	return usagef("sim", "unknown subcommand %q", args[0])
}

func runQuotaStick(ctx context.Context, e env, args []string) error {
	fs := newFlagSet("sim quota-stick")
	kubeconfig := fs.String("kubeconfig", "", "")
	pos, err := parseFlags(fs, "sim quota-stick", args, e.stdout, quotaStickUsage)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("sim quota-stick", "want exactly one serial, got %d arguments", len(pos))
	}
	c, _, err := adminClient(*kubeconfig)
	if err != nil {
		return err
	}
	name := enroll.NodeName(pos[0])
	// A fresh value each time: the agent acts on a value it has not seen.
	nonce := time.Now().UTC().Format(time.RFC3339Nano)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{fleetv1alpha1.SimQuotaStickAnnotation: nonce}}})
	if err != nil {
		return err
	}
	mn := &fleetv1alpha1.MacNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Patch(ctx, mn, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("%w: asking %s to stick its quota: %w", errInput, pos[0], err)
	}
	fmt.Fprintf(e.stdout, "asked sim chassis %s (MacNode %s) to stick its kernel VM quota; watch: kubectl get mn %s -w\n", pos[0], name, name)
	return nil
}
