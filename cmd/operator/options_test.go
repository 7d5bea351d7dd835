package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// In production mode the operator does not start without the GitLab hosts
// runners may send their tokens to; outside it, or with hosts, it does.
func TestProductionRefusesToStartWithoutGitLabAllowedHosts(t *testing.T) {
	for _, c := range []struct {
		name    string
		opts    options
		refused bool
	}{
		{"production without hosts is refused", options{production: true}, true},
		{"production with only separators is refused", options{production: true, gitlabAllowedHosts: " , ,"}, true},
		{"production with gitlab.com starts", options{production: true, gitlabAllowedHosts: "gitlab.com"}, false},
		{"production with a wildcard starts", options{production: true, gitlabAllowedHosts: "gitlab.com,*.corp.example"}, false},
		{"a development run without hosts starts", options{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.opts.validate()
			if got := errors.Is(err, errUnsafeSettings); got != c.refused {
				t.Fatalf("validate() = %v, want refused=%v", err, c.refused)
			}
			if c.refused && !strings.Contains(err.Error(), "--production needs --gitlab-allowed-hosts") {
				t.Fatalf("the message does not say what to set: %v", err)
			}
		})
	}
}

// run refuses before it reads a kubeconfig or starts anything.
func TestRunStopsOnUnsafeProductionSettings(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent")
	err := run(logr.Discard(), options{production: true})
	if !errors.Is(err, errUnsafeSettings) {
		t.Fatalf("run = %v, want errUnsafeSettings", err)
	}
}
