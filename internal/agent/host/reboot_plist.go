package host

// The reboot helper: a root LaunchDaemon that runs /sbin/shutdown -r now
// once for each connection to its socket. The agent runs unprivileged, and
// an unprivileged process may not start a job of launchd's system domain
// (launchctl kickstart system/... needs root), but it may connect to a
// socket launchd listens on for such a job: launchd accepts the connection
// and runs the job as root, with the connection as its stdin, stdout and
// stderr (inetdCompatibility, Wait false). Nothing else runs as root, and
// the job takes no input: whoever reaches the socket can only ask for a
// reboot.
//
// The socket's mode is 0666; its directory, root:<the agent's group> 0750,
// is what admits the agent alone, whatever owner and group launchd gives
// the socket itself (SockPathOwner and SockPathGroup want numeric IDs a
// plist shared by every Mac cannot know).
//
// The LaunchDaemon itself is deploy/macos/io.macrack.reboot.plist, which
// the host package installs (root:wheel, 0644) and its postinstall loads
// with launchctl bootstrap system. It runs nothing at load and is never
// kept alive: only a connection runs it. AbandonProcessGroup keeps launchd
// from killing the background child shutdown forks to carry out the reboot
// when the job's process exits. deploy/macos's tests hold it to the
// constants below.

const (
	// RebootDaemonLabel is the LaunchDaemon's label.
	RebootDaemonLabel = "io.macrack.reboot"
	// RebootDaemonPlistPath is where the LaunchDaemon is installed.
	RebootDaemonPlistPath = "/Library/LaunchDaemons/" + RebootDaemonLabel + ".plist"
	// RebootSocketDir is the socket's directory: root:<agent group>, 0750.
	RebootSocketDir = "/Library/MacRack/reboot"
	// RebootSocketPath is the socket launchd listens on for the job.
	RebootSocketPath = RebootSocketDir + "/reboot.sock"
)
