package custom

import (
	"path"
	"runtime/debug"
)

// DriverName is the driver gitlab-runner prints in "Using Custom executor
// with driver …".
const DriverName = "macrack"

// ConfigOutput is the config stage's JSON, with gitlab-runner's field
// names (executors/custom/api/config.go ConfigExecOutput). It sets no
// job_env: nothing the later stages need comes through gitlab-runner.
type ConfigOutput struct {
	BuildsDir string `json:"builds_dir"`
	CacheDir  string `json:"cache_dir"`
	// BuildsDirIsShared is false: each job has a fresh VM.
	BuildsDirIsShared bool       `json:"builds_dir_is_shared"`
	Hostname          string     `json:"hostname,omitempty"`
	Driver            DriverInfo `json:"driver"`
	// Shell is the shell gitlab-runner writes the scripts for; the VM
	// runs them with bash.
	Shell string `json:"shell"`
}

// DriverInfo names the driver.
type DriverInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// configOutput is the config stage's answer for a VM whose login user is
// user. The builds live in the user's home, which the job's scripts can
// write without sudo.
func configOutput(user, hostname string) ConfigOutput {
	home := path.Join("/Users", user)
	return ConfigOutput{
		BuildsDir: path.Join(home, "builds"),
		CacheDir:  path.Join(home, "cache"),
		Hostname:  hostname,
		Driver:    DriverInfo{Name: DriverName, Version: driverVersion()},
		Shell:     "bash",
	}
}

// driverVersion is the binary's module version, as go build stamps it.
func driverVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
