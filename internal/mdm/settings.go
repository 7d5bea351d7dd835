// Package mdm is what MacRack hands an MDM for one chassis: the
// configuration profile that `macrackctl node enroll --profile` writes, and
// the agent's settings it carries as managed preferences, which the agent
// reads back on the Mac. The signed package and the software-update
// declaration are the same for every chassis: deploy/macos.
package mdm

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"howett.net/plist"
)

// PreferenceDomain is the agent's preference domain. macOS writes a
// device profile's managed preferences for it to ManagedPreferencesPath.
const PreferenceDomain = "io.macrack.agent"

// ManagedPreferencesPath is where macOS keeps the managed preferences of
// PreferenceDomain that a device profile installs: root:wheel, readable by
// every local account (docs/mdm.md says what follows for the token).
const ManagedPreferencesPath = "/Library/Managed Preferences/" + PreferenceDomain + ".plist"

// ErrSettings means the agent's managed preferences are unusable.
var ErrSettings = errors.New("invalid agent settings")

// Settings are the agent's per-chassis settings, the keys of its managed
// preferences. The LaunchDaemon (deploy/macos/io.macrack.agent.plist) is
// the same on every Mac; these make it this chassis' agent.
type Settings struct {
	// Serial is the chassis' serial, as Apple prints it.
	Serial string `plist:"Serial"`
	// AgentsNamespace holds the agents' ServiceAccounts.
	AgentsNamespace string `plist:"AgentsNamespace"`
	// BootstrapKubeconfig is the kubeconfig of `macrackctl node enroll`,
	// with its time-bound token; the agent then renews its own token
	// into its state directory.
	BootstrapKubeconfig string `plist:"BootstrapKubeconfig"`
}

// settingsKeys are the keys Settings knows, for the strict read.
var settingsKeys = map[string]bool{"Serial": true, "AgentsNamespace": true, "BootstrapKubeconfig": true}

// Validate says which setting is missing.
func (s Settings) Validate() error {
	var missing []string
	for _, f := range []struct{ key, value string }{
		{"Serial", s.Serial}, {"AgentsNamespace", s.AgentsNamespace}, {"BootstrapKubeconfig", s.BootstrapKubeconfig},
	} {
		if strings.TrimSpace(f.value) == "" {
			missing = append(missing, f.key)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s missing", ErrSettings, strings.Join(missing, ", "))
	}
	return nil
}

// maxPreferencesBytes bounds the file read: a kubeconfig and a few strings.
const maxPreferencesBytes = 1 << 20

// ReadManagedPreferences reads the agent's settings from path, the plist
// macOS wrote from the profile (XML or binary). A key Settings does not
// know is an error, not ignored: a misspelt setting must not pass for an
// absent one.
func ReadManagedPreferences(path string) (Settings, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Settings{}, fmt.Errorf("%w: %w (is the chassis' configuration profile installed?)", ErrSettings, err)
	}
	return ParseManagedPreferences(b)
}

// ParseManagedPreferences is ReadManagedPreferences of a file's content.
func ParseManagedPreferences(b []byte) (Settings, error) {
	if len(b) > maxPreferencesBytes {
		return Settings{}, fmt.Errorf("%w: %d bytes, over %d", ErrSettings, len(b), maxPreferencesBytes)
	}
	var raw map[string]any
	if _, err := plist.Unmarshal(b, &raw); err != nil {
		return Settings{}, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	var unknown []string
	for k, v := range raw {
		if !settingsKeys[k] {
			unknown = append(unknown, k)
			continue
		}
		if _, ok := v.(string); !ok {
			return Settings{}, fmt.Errorf("%w: %s is a %T, not a string", ErrSettings, k, v)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Settings{}, fmt.Errorf("%w: unknown keys %s", ErrSettings, strings.Join(unknown, ", "))
	}
	var s Settings
	if _, err := plist.Unmarshal(b, &s); err != nil {
		return Settings{}, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	return s, s.Validate()
}
