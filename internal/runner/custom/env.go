package custom

import (
	"fmt"
	"regexp"
	"strconv"
)

// Environment the agent sets on gitlab-runner, which the stages inherit
// (executors/custom/command/command.go starts them with os.Environ()).
const (
	// EnvSocket is the path of the job's stage socket.
	EnvSocket = "MACRACK_STAGE_SOCKET"
	// EnvVMUser is the VM's login user, whose home holds the builds.
	EnvVMUser = "MACRACK_VM_USER"
	// EnvVMHostname is the VM's name, reported as the job's hostname.
	EnvVMHostname = "MACRACK_VM_HOSTNAME"
)

// Environment gitlab-runner gives every stage (executors/custom/api/const.go).
const (
	EnvBuildFailureExitCode  = "BUILD_FAILURE_EXIT_CODE"
	EnvSystemFailureExitCode = "SYSTEM_FAILURE_EXIT_CODE"
	EnvBuildExitCodeFile     = "BUILD_EXIT_CODE_FILE"
)

// gitlab-runner's values for the failure codes (executors/custom/command:
// BuildFailureExitCode, SystemFailureExitCode), used when the variables
// are missing; the docs say to read the variables, as they may change.
const (
	defaultBuildFailureExitCode  = 1
	defaultSystemFailureExitCode = 2
)

// loginUserRe is what a macOS short user name may be, so that it can go
// into a path unquoted.
var loginUserRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// exitCodes are the codes a stage exits with.
type exitCodes struct {
	build, system int
}

// exitCodesFrom reads the failure codes gitlab-runner set, or its
// defaults.
func exitCodesFrom(getenv func(string) string) (exitCodes, error) {
	c := exitCodes{build: defaultBuildFailureExitCode, system: defaultSystemFailureExitCode}
	for _, v := range []struct {
		name string
		to   *int
	}{{EnvBuildFailureExitCode, &c.build}, {EnvSystemFailureExitCode, &c.system}} {
		s := getenv(v.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 255 {
			return c, fmt.Errorf("%w: %s=%q is not an exit code", ErrUsage, v.name, s)
		}
		*v.to = n
	}
	return c, nil
}
