package main

import (
	"context"
	"runtime"
	"testing"

	"github.com/go-logr/logr"

	fleetv1alpha1 "github.com/boualleiguie/macrack-operator/api/fleet/v1alpha1"
	"github.com/boualleiguie/macrack-operator/internal/agent/host"
)

func TestTheSimKeepsItsStaticFacts(t *testing.T) {
	sim := host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{Chip: "M4", AgentVersion: "sim"}}
	src, err := factsSource("sim", sim, "/nonexistent/vm-helper", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	f, err := src.Facts(context.Background())
	if err != nil || f.Chip != "M4" || f.AgentVersion != "sim" {
		t.Fatalf("got %+v, %v", f, err)
	}
}

func TestTheVZDriverNeverReportsTheSimsFlags(t *testing.T) {
	sim := host.StaticFacts{Reported: &fleetv1alpha1.ReportedFacts{AgentVersion: "sim"}}
	src, err := factsSource("vz", sim, "/nonexistent/vm-helper", logr.Discard())
	if runtime.GOOS != "darwin" {
		if err == nil {
			t.Fatal("the vz driver's facts off a Mac")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.(host.StaticFacts); ok {
		t.Fatal("the vz driver reports the --sim-* flags")
	}
}
