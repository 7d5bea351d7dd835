package mdm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"howett.net/plist"
)

// A kubeconfig with what XML must escape.
const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: macrack
  cluster: {server: "https://api.example.com:6443?a=1&b=<2>"}
users:
- name: agent-c02xl0ghjgh5
  user: {token: "eyJhbGciOi.secret"}
`

func testSettings() Settings {
	return Settings{Serial: "C02XL0GHJGH5", AgentsNamespace: "macrack-agents", BootstrapKubeconfig: kubeconfig}
}

// counter is a PayloadUUID source the tests can predict.
func counter() func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	}
}

func parseProfile(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var p map[string]any
	format, err := plist.Unmarshal(b, &p)
	if err != nil {
		t.Fatalf("the profile is not a property list: %v", err)
	}
	if format != plist.XMLFormat {
		t.Fatalf("format %d: MDMs take an XML .mobileconfig", format)
	}
	return p
}

// payloads are the profile's PayloadContent by PayloadType.
func payloads(t *testing.T, p map[string]any) map[string]map[string]any {
	t.Helper()
	content, ok := p["PayloadContent"].([]any)
	if !ok {
		t.Fatalf("PayloadContent is a %T", p["PayloadContent"])
	}
	out := map[string]map[string]any{}
	for _, c := range content {
		m, ok := c.(map[string]any)
		if !ok {
			t.Fatalf("a payload is a %T", c)
		}
		kind, _ := m["PayloadType"].(string)
		if _, dup := out[kind]; dup {
			t.Fatalf("two %s payloads", kind)
		}
		out[kind] = m
	}
	return out
}

var uuidPattern = regexp.MustCompile(`^[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}$`)

func TestTheProfileHasTheKeysMacOSRequires(t *testing.T) {
	b, err := Profile(testSettings(), NewPayloadUUID)
	if err != nil {
		t.Fatal(err)
	}
	p := parseProfile(t, b)
	for _, k := range []string{"PayloadType", "PayloadIdentifier", "PayloadUUID", "PayloadVersion", "PayloadContent"} {
		if _, ok := p[k]; !ok {
			t.Errorf("the profile has no %s", k)
		}
	}
	if p["PayloadType"] != ProfileType || p["PayloadVersion"] != uint64(1) || p["PayloadScope"] != "System" {
		t.Errorf("PayloadType %v, PayloadVersion %v, PayloadScope %v", p["PayloadType"], p["PayloadVersion"], p["PayloadScope"])
	}
	id, _ := p["PayloadIdentifier"].(string)
	if id != "io.macrack.chassis.c02xl0ghjgh5" {
		t.Errorf("PayloadIdentifier %q: a profile written again for the serial must replace this one", id)
	}
	uuids := map[any]bool{p["PayloadUUID"]: true}
	got := payloads(t, p)
	want := []string{ManagedPreferencesType, SoftwareUpdateType, RestrictionsType}
	if len(got) != len(want) {
		t.Errorf("%d payloads, want %q", len(got), want)
	}
	for _, kind := range want {
		pl, ok := got[kind]
		if !ok {
			t.Errorf("no %s payload", kind)
			continue
		}
		for _, k := range []string{"PayloadType", "PayloadIdentifier", "PayloadUUID", "PayloadVersion"} {
			if _, ok := pl[k]; !ok {
				t.Errorf("%s: no %s", kind, k)
			}
		}
		if sub, _ := pl["PayloadIdentifier"].(string); !strings.HasPrefix(sub, id+".") {
			t.Errorf("%s: PayloadIdentifier %q is not under %q", kind, sub, id)
		}
		uuids[pl["PayloadUUID"]] = true
	}
	for u := range uuids {
		if s, _ := u.(string); !uuidPattern.MatchString(s) {
			t.Errorf("PayloadUUID %v is not an upper-case UUID", u)
		}
	}
	if len(uuids) != 1+len(want) {
		t.Errorf("%d distinct PayloadUUIDs for %d payloads and the profile", len(uuids), len(want))
	}
	// Each profile is new: written twice, two sets of UUIDs.
	again, err := Profile(testSettings(), NewPayloadUUID)
	if err != nil {
		t.Fatal(err)
	}
	if parseProfile(t, again)["PayloadUUID"] == p["PayloadUUID"] {
		t.Error("two profiles share a PayloadUUID")
	}
}

func TestTheProfileNeverLetsUpdatesInstallOnTheirOwn(t *testing.T) {
	b, err := Profile(testSettings(), counter())
	if err != nil {
		t.Fatal(err)
	}
	got := payloads(t, parseProfile(t, b))
	su := got[SoftwareUpdateType]
	for _, k := range []string{"AutomaticallyInstallMacOSUpdates", "CriticalUpdateInstall", "AutomaticDownload", "AutomaticallyInstallAppUpdates"} {
		if su[k] != false {
			t.Errorf("%s.%s %v, want false", SoftwareUpdateType, k, su[k])
		}
	}
	r := got[RestrictionsType]
	if r["forceDelayedMajorSoftwareUpdates"] != true {
		t.Errorf("forceDelayedMajorSoftwareUpdates %v", r["forceDelayedMajorSoftwareUpdates"])
	}
	if d, _ := r["enforcedSoftwareUpdateMajorOSDeferredInstallDelay"].(uint64); d < 1 || d > 90 || d != MajorUpgradeDeferralDays {
		t.Errorf("enforcedSoftwareUpdateMajorOSDeferredInstallDelay %v: Apple allows 1 to 90 days; want %d", d, MajorUpgradeDeferralDays)
	}
}

// managedPreferences is what macOS writes to ManagedPreferencesPath from
// the profile: the forced settings of PreferenceDomain, as a binary plist.
func managedPreferences(t *testing.T, profile []byte) []byte {
	t.Helper()
	mp := payloads(t, parseProfile(t, profile))[ManagedPreferencesType]
	domains, _ := mp["PayloadContent"].(map[string]any)
	domain, _ := domains[PreferenceDomain].(map[string]any)
	forced, _ := domain["Forced"].([]any)
	if len(forced) != 1 {
		t.Fatalf("%s: Forced %#v, want one entry", PreferenceDomain, domain["Forced"])
	}
	entry, _ := forced[0].(map[string]any)
	settings, ok := entry["mcx_preference_settings"].(map[string]any)
	if !ok {
		t.Fatalf("no mcx_preference_settings in %#v", entry)
	}
	b, err := plist.Marshal(settings, plist.BinaryFormat)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheAgentReadsTheSettingsTheProfileCarries(t *testing.T) {
	b, err := Profile(testSettings(), counter())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), PreferenceDomain+".plist")
	if err := os.WriteFile(path, managedPreferences(t, b), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadManagedPreferences(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, testSettings()) {
		t.Fatalf("read %+v, want %+v", got, testSettings())
	}
}

func TestBadManagedPreferencesAreRefusedByName(t *testing.T) {
	enc := func(v any) []byte {
		b, err := plist.Marshal(v, plist.XMLFormat)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	good := map[string]any{"Serial": "C02XL0GHJGH5", "AgentsNamespace": "macrack-agents", "BootstrapKubeconfig": kubeconfig}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, c := range []struct {
		name string
		doc  []byte
		want string
	}{
		{"a misspelt key is not an absent one", enc(with("serial", "C02XL0GHJGH5")), "unknown keys serial"},
		{"a missing serial is named", enc(with("Serial", nil)), "Serial missing"},
		{"a blank kubeconfig is missing", enc(with("BootstrapKubeconfig", "  ")), "BootstrapKubeconfig missing"},
		{"a number is not a serial", enc(with("Serial", 42)), "Serial is a uint64"},
		{"not a property list", []byte("serial: C02XL0GHJGH5"), ErrSettings.Error()},
		{"a huge file", append(enc(good), make([]byte, maxPreferencesBytes)...), "over"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseManagedPreferences(c.doc)
			if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrSettings naming %q", err, c.want)
			}
		})
	}
	t.Run("the control: good settings are read", func(t *testing.T) {
		if _, err := ParseManagedPreferences(enc(good)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no file says which profile", func(t *testing.T) {
		_, err := ReadManagedPreferences(filepath.Join(t.TempDir(), "absent.plist"))
		if !errors.Is(err, ErrSettings) || !strings.Contains(err.Error(), "configuration profile") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestAProfileWithoutItsSettingsIsNotWritten(t *testing.T) {
	s := testSettings()
	s.BootstrapKubeconfig = ""
	if _, err := Profile(s, counter()); !errors.Is(err, ErrSettings) {
		t.Fatalf("got %v, want ErrSettings", err)
	}
}
