package policy

import (
	"context"
	"strings"
	"testing"

	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/boualleiguie/macrack-operator/policies"
)

// TestTwinsBindTheirOwnVariables: the engine's twins evaluate their
// conditions with the variables bound by celVariables, not by the plugin's
// composited evaluators (which the reference engine keeps), so that the
// comparison in vectors' TestCELVariablesAnswerAsThePlugins compares two
// different bindings.
func TestTwinsBindTheirOwnVariables(t *testing.T) {
	for _, plugin := range []bool{false, true} {
		opts := []Option{}
		if plugin {
			opts = append(opts, WithPluginVariables())
		}
		e, err := Load(context.Background(), policies.FS, opts...)
		if err != nil {
			t.Fatal(err)
		}
		twins := 0
		for _, r := range e.Rules() {
			if r.cel == nil {
				continue
			}
			twins++
			vap := r.cel.vap
			_, composited := vap.validations.(*plugincel.CompositedConditionEvaluator)
			if composited != plugin {
				t.Errorf("%s (plugin variables %v): validations composited = %v", r.ID, plugin, composited)
			}
			if _, isOwn := vap.variables.bind(context.Background()).(*celVariablesContext); isOwn == plugin {
				t.Errorf("%s (plugin variables %v): binds its own variables = %v", r.ID, plugin, isOwn)
			}
		}
		if twins == 0 {
			t.Fatal("no CEL twin loaded")
		}
	}
}

// TestUnescapeAnswersAsTheAPIServers: the shortcut for names without "__"
// answers as apiservercel.Unescape, on every string of up to six characters
// over an alphabet that spells its escapes' delimiters.
func TestUnescapeAnswersAsTheAPIServers(t *testing.T) {
	names := []string{"", "a", "a__dot__b", "__underscores__", "x__y", "__if__", "a__b__c", "a__unknown__b", "__dash__", "node_name"}
	alphabet := []byte("a_d.")
	var grow func(prefix string)
	grow = func(prefix string) {
		names = append(names, prefix)
		if len(prefix) == 6 {
			return
		}
		for _, c := range alphabet {
			grow(prefix + string(c))
		}
	}
	grow("")
	shortcuts := 0
	for _, n := range names {
		got, gotOK := unescape(n)
		want, wantOK := apiservercel.Unescape(n)
		if got != want || gotOK != wantOK {
			t.Errorf("unescape(%q) = %q, %v; the API server's %q, %v", n, got, gotOK, want, wantOK)
		}
		if !strings.Contains(n, "__") {
			shortcuts++
		}
	}
	if shortcuts == 0 || shortcuts == len(names) {
		t.Fatalf("%d of %d names take the shortcut: the test exercises one side only", shortcuts, len(names))
	}
}
