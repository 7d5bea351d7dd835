package mdm

import (
	"bytes"
	"fmt"
	"strings"

	"howett.net/plist"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// The payload types of a chassis' profile (Apple's Device Management
// reference, mdm/profiles in apple/device-management).
const (
	// ProfileType is the profile's own PayloadType.
	ProfileType = "Configuration"
	// ManagedPreferencesType carries the agent's Settings.
	ManagedPreferencesType = "com.apple.ManagedClient.preferences"
	// SoftwareUpdateType turns off the automatic installs (macOS 10.15 to
	// 15; deprecated in macOS 26, where SoftwareUpdateDeclarationType
	// rules).
	SoftwareUpdateType = "com.apple.SoftwareUpdate"
	// RestrictionsType defers major upgrades (the legacy restrictions).
	RestrictionsType = "com.apple.applicationaccess"
)

// MajorUpgradeDeferralDays is how long a new major macOS stays out of a
// chassis' sight: the most a restriction or a declaration allows. A major
// upgrade changes Virtualization.framework under running leases; an
// operator installs it between leases, on purpose.
const MajorUpgradeDeferralDays = 90

// ProfileIdentifier is the profile's PayloadIdentifier: one per chassis,
// so that a profile written again for the same serial replaces the old one.
func ProfileIdentifier(serial string) string {
	return "io.macrack.chassis." + strings.ToLower(serial)
}

// NewPayloadUUID is a fresh PayloadUUID, upper case as Apple writes them.
func NewPayloadUUID() string { return strings.ToUpper(string(uuid.NewUUID())) }

// Profile renders the chassis' configuration profile (.mobileconfig, an
// XML plist) for a device-channel install:
//   - the agent's Settings as managed preferences of PreferenceDomain;
//   - software updates that never install, nor restart the Mac, on their
//     own: com.apple.SoftwareUpdate's automatic installs off, and major
//     upgrades deferred by the restrictions payload. These are the legacy
//     payloads, for macOS before 15; current macOS takes the declaration
//     deploy/macos/softwareupdate-settings.json, which wins where both are.
//
// newUUID makes each payload's PayloadUUID.
func Profile(s Settings, newUUID func() string) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	id := ProfileIdentifier(s.Serial)
	payload := func(kind, suffix, name string, keys map[string]any) map[string]any {
		p := map[string]any{
			"PayloadType":        kind,
			"PayloadIdentifier":  id + "." + suffix,
			"PayloadUUID":        newUUID(),
			"PayloadVersion":     1,
			"PayloadDisplayName": name,
		}
		for k, v := range keys {
			p[k] = v
		}
		return p
	}
	profile := map[string]any{
		"PayloadType":        ProfileType,
		"PayloadVersion":     1,
		"PayloadIdentifier":  id,
		"PayloadUUID":        newUUID(),
		"PayloadDisplayName": "MacRack chassis " + s.Serial,
		"PayloadDescription": "The MacRack host agent's settings for chassis " + s.Serial +
			", with its bootstrap credentials, and software updates that never install or restart the Mac on their own.",
		"PayloadOrganization":      "MacRack",
		"PayloadScope":             "System",
		"PayloadRemovalDisallowed": true,
		// 5: a Mac.
		"TargetDeviceType": 5,
		"PayloadContent": []any{
			payload(ManagedPreferencesType, "agent", "MacRack agent settings", map[string]any{
				"PayloadContent": map[string]any{
					PreferenceDomain: map[string]any{
						"Forced": []any{map[string]any{"mcx_preference_settings": s}},
					},
				},
			}),
			payload(SoftwareUpdateType, "softwareupdate", "Software updates by the operator only", map[string]any{
				"AutomaticCheckEnabled":            true,
				"AutomaticDownload":                false,
				"AutomaticallyInstallMacOSUpdates": false,
				"AutomaticallyInstallAppUpdates":   false,
				"CriticalUpdateInstall":            false,
				// XProtect and Gatekeeper data: no restart.
				"ConfigDataInstall": true,
			}),
			payload(RestrictionsType, "restrictions", "Major macOS upgrades deferred", map[string]any{
				"forceDelayedMajorSoftwareUpdates":                  true,
				"enforcedSoftwareUpdateMajorOSDeferredInstallDelay": MajorUpgradeDeferralDays,
			}),
		},
	}
	var b bytes.Buffer
	enc := plist.NewEncoderForFormat(&b, plist.XMLFormat)
	enc.Indent("\t")
	if err := enc.Encode(profile); err != nil {
		return nil, fmt.Errorf("encoding the profile of %s: %w", s.Serial, err)
	}
	return b.Bytes(), nil
}
