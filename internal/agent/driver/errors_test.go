package driver

import (
	"errors"
	"fmt"
	"testing"
)

func TestIsLimitExceeded(t *testing.T) {
	limit := &VZError{Domain: DomainVZ, Code: CodeVirtualMachineLimitExceeded, Message: "limit"}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"the quota's code 6 is the limit", limit, true},
		{"code 6 wrapped with context is still the limit", fmt.Errorf("starting ci-1: %w", limit), true},
		{"another VZ code is not the limit", &VZError{Domain: DomainVZ, Code: CodeInvalidVirtualMachineStateTransition}, false},
		{"code 6 of another domain is not the limit", &VZError{Domain: "NSPOSIXErrorDomain", Code: 6}, false},
		{"a plain error is not the limit", errors.New("code 6"), false},
		{"no error is not the limit", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := IsLimitExceeded(c.err); got != c.want {
				t.Fatalf("IsLimitExceeded(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

func TestVZErrorMessageNamesDomainAndCode(t *testing.T) {
	err := &VZError{Domain: DomainVZ, Code: 6, Message: "the maximum supported number of active virtual machines has been reached"}
	want := "VZErrorDomain code 6: the maximum supported number of active virtual machines has been reached"
	if err.Error() != want {
		t.Fatalf("got %q, want %q", err.Error(), want)
	}
}
