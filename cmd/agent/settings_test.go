package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"howett.net/plist"

	"github.com/boualleiguie/macrack-operator/internal/mdm"
)

// MACRACK_AGENT_ARGS makes the test binary the agent: main() with these
// arguments, one a line. The LaunchDaemon's arguments are thus parsed by
// the agent's real flag set.
const agentArgsEnv = "MACRACK_AGENT_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(agentArgsEnv); ok {
		os.Args = append([]string{"agent"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runAgent runs main() in a child process with args.
func runAgent(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), agentArgsEnv+"="+strings.Join(args, "\n"))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// daemonArgs are deploy/macos/io.macrack.agent.plist's ProgramArguments
// after the program.
func daemonArgs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../deploy/macos/io.macrack.agent.plist")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		ProgramArguments []string `plist:"ProgramArguments"`
	}
	if _, err := plist.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.ProgramArguments) < 2 || filepath.Base(d.ProgramArguments[0]) != "agent" {
		t.Fatalf("ProgramArguments %q", d.ProgramArguments)
	}
	return d.ProgramArguments[1:]
}

func TestTheLaunchDaemonsArgumentsAreTheAgentsFlags(t *testing.T) {
	args := daemonArgs(t)
	if out, code := runAgent(t, append(args, "-h")...); code != 0 || strings.Contains(out, "not defined") {
		t.Fatalf("the agent refuses its LaunchDaemon's arguments %q: exit %d\n%s", args, code, out)
	}
	// The control: a flag the agent lacks is refused.
	if out, code := runAgent(t, append(args, "--no-such-flag", "-h")...); code != 2 || !strings.Contains(out, "flag provided but not defined: -no-such-flag") {
		t.Fatalf("an unknown flag: exit %d\n%s", code, out)
	}
}

func TestTheAgentStopsOnUnreadableManagedPreferences(t *testing.T) {
	path := filepath.Join(t.TempDir(), mdm.PreferenceDomain+".plist")
	if err := os.WriteFile(path, []byte("<plist><dict><key>serial</key><string>x</string></dict></plist>"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runAgent(t, "--managed-preferences="+path)
	if code != 1 || !strings.Contains(out, "--managed-preferences "+path) || !strings.Contains(out, "unknown keys serial") {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func writePreferences(t *testing.T, s mdm.Settings) string {
	t.Helper()
	b, err := plist.Marshal(s, plist.BinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), mdm.PreferenceDomain+".plist")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func agentFlags() (*flag.FlagSet, *string, *string, *string) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	serial := fs.String("serial", "", "")
	ns := fs.String("agents-namespace", "macrack-agents", "")
	kubeconfig := fs.String("kubeconfig", "", "")
	return fs, serial, ns, kubeconfig
}

func TestManagedPreferencesFillTheFlagsNotGiven(t *testing.T) {
	s := mdm.Settings{Serial: "C02XL0GHJGH5", AgentsNamespace: "fleet-agents", BootstrapKubeconfig: "apiVersion: v1\nkind: Config\n"}
	path := writePreferences(t, s)

	fs, serial, ns, _ := agentFlags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	kc, err := managedSettings(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	if *serial != s.Serial || *ns != s.AgentsNamespace || string(kc) != s.BootstrapKubeconfig {
		t.Fatalf("serial %q, namespace %q, kubeconfig %q", *serial, *ns, kc)
	}

	// Flags given on the command line win, --kubeconfig included.
	fs, serial, ns, _ = agentFlags()
	if err := fs.Parse([]string{"--serial", "C02OTHER0001", "--kubeconfig", "/etc/agent.kubeconfig"}); err != nil {
		t.Fatal(err)
	}
	if kc, err = managedSettings(fs, path); err != nil {
		t.Fatal(err)
	}
	if *serial != "C02OTHER0001" || *ns != s.AgentsNamespace || kc != nil {
		t.Fatalf("serial %q, namespace %q, kubeconfig %q", *serial, *ns, kc)
	}
}
