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
// the socket itself (SockPathOwner and SockPathGroup want numeric IDs this
// constant cannot know).

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

// RebootDaemonPlist is the LaunchDaemon, installed as RebootDaemonPlistPath
// (root:wheel, 0644) and loaded with launchctl bootstrap system. It runs
// nothing at load and is never kept alive: only a connection runs it.
// AbandonProcessGroup keeps launchd from killing the background child
// shutdown forks to carry out the reboot when the job's process exits.
const RebootDaemonPlist = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + RebootDaemonLabel + `</string>
	<key>UserName</key>
	<string>root</string>
	<key>ProgramArguments</key>
	<array>
		<string>/sbin/shutdown</string>
		<string>-r</string>
		<string>now</string>
	</array>
	<key>Sockets</key>
	<dict>
		<key>Listener</key>
		<dict>
			<key>SockType</key>
			<string>stream</string>
			<key>SockFamily</key>
			<string>Unix</string>
			<key>SockPathName</key>
			<string>` + RebootSocketPath + `</string>
			<key>SockPathMode</key>
			<integer>438</integer>
		</dict>
	</dict>
	<key>inetdCompatibility</key>
	<dict>
		<key>Wait</key>
		<false/>
	</dict>
	<key>RunAtLoad</key>
	<false/>
	<key>KeepAlive</key>
	<false/>
	<key>AbandonProcessGroup</key>
	<true/>
</dict>
</plist>
`
