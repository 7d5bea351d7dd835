package host

import (
	"encoding/xml"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// plistValue decodes the next plist value of d, whose start element is se:
// a dict is a map[string]any, an array a []any, true and false bools,
// anything else its text.
func plistValue(d *xml.Decoder, se xml.StartElement) (any, error) {
	switch se.Name.Local {
	case "dict":
		m := map[string]any{}
		var key string
		for {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			switch t := tok.(type) {
			case xml.StartElement:
				if t.Name.Local == "key" {
					if err := d.DecodeElement(&key, &t); err != nil {
						return nil, err
					}
					continue
				}
				if _, dup := m[key]; dup {
					return nil, fmt.Errorf("key %q twice", key)
				}
				v, err := plistValue(d, t)
				if err != nil {
					return nil, err
				}
				m[key] = v
			case xml.EndElement:
				return m, nil
			}
		}
	case "array":
		var a []any
		for {
			tok, err := d.Token()
			if err != nil {
				return nil, err
			}
			switch t := tok.(type) {
			case xml.StartElement:
				v, err := plistValue(d, t)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			case xml.EndElement:
				return a, nil
			}
		}
	case "true", "false":
		if err := d.Skip(); err != nil {
			return nil, err
		}
		return se.Name.Local == "true", nil
	default:
		var s string
		err := d.DecodeElement(&s, &se)
		return s, err
	}
}

func parsePlist(t *testing.T, doc string) map[string]any {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			t.Fatal("no plist element")
		}
		if err != nil {
			t.Fatal(err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "plist" {
			for {
				tok, err := d.Token()
				if err != nil {
					t.Fatal(err)
				}
				if se, ok := tok.(xml.StartElement); ok {
					v, err := plistValue(d, se)
					if err != nil {
						t.Fatal(err)
					}
					m, ok := v.(map[string]any)
					if !ok {
						t.Fatalf("the plist is a %T, not a dict", v)
					}
					return m
				}
			}
		}
	}
}

func TestTheRebootDaemonRunsShutdownAndNothingElse(t *testing.T) {
	p := parsePlist(t, RebootDaemonPlist)
	if p["Label"] != RebootDaemonLabel || p["UserName"] != "root" {
		t.Fatalf("label %v, user %v", p["Label"], p["UserName"])
	}
	if got, want := p["ProgramArguments"], []any{"/sbin/shutdown", "-r", "now"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ProgramArguments %#v, want exactly %#v", got, want)
	}
	if _, ok := p["Program"]; ok {
		t.Fatal("a Program key would run something else than ProgramArguments[0]")
	}
	// Only a connection runs it: never at load, never kept alive.
	if p["RunAtLoad"] != false || p["KeepAlive"] != false || p["AbandonProcessGroup"] != true {
		t.Fatalf("RunAtLoad %v, KeepAlive %v, AbandonProcessGroup %v", p["RunAtLoad"], p["KeepAlive"], p["AbandonProcessGroup"])
	}
	if got := p["inetdCompatibility"]; !reflect.DeepEqual(got, map[string]any{"Wait": false}) {
		t.Fatalf("inetdCompatibility %#v", got)
	}
	want := map[string]any{"Listener": map[string]any{
		"SockType": "stream", "SockFamily": "Unix", "SockPathName": RebootSocketPath, "SockPathMode": "438",
	}}
	if got := p["Sockets"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("Sockets %#v, want %#v", got, want)
	}
	for _, k := range []string{"WatchPaths", "QueueDirectories", "StartInterval", "StartCalendarInterval", "EnvironmentVariables"} {
		if _, ok := p[k]; ok {
			t.Errorf("%s would run the job without a request, or change what it runs", k)
		}
	}
}

func TestTheRebootDaemonTouchesNoSecuritySetting(t *testing.T) {
	doc := strings.ToLower(RebootDaemonPlist)
	for _, word := range []string{"nv" + "ram", "boot" + "-args", "bootargs", "csr" + "util", "hv_apple_isa" + "_vm_quota"} {
		if strings.Contains(doc, word) {
			t.Errorf("the reboot daemon mentions %q", word)
		}
	}
}
