package policy

import (
	"context"
	"testing"

	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"

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
