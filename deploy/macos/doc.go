// Package macos holds the Mac side's payload as files: the entitlements the
// agent and vm-helper are signed with, the agent's and the reboot helper's
// LaunchDaemons, the host package's scripts and build-pkg.sh, and the
// software-update declaration. docs/mdm.md says what goes where. The
// package has no code: its tests parse every file, run the scripts against
// stand-ins for macOS's commands, and hold the files to the Go constants
// they share with the agent.
package macos
