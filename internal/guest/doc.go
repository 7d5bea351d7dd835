// Package guest is the protocol between the host agent and the guest agent
// that runs inside each macOS VM, over vsock.
//
// The host dials the guest (through the VM helper's DialGuest) and talks
// request/response over one stream:
//
//	host → guest  Hello{protocolVersion}
//	guest → host  HelloAck{protocolVersion, agentVersion}  or Error
//	host → guest  ReportRequest{}
//	guest → host  Report{...}                              or Error
//	(ReportRequest/Report repeat until either side closes)
//	host → guest  Configure{config}                        (since 1.2)
//	guest → host  ConfigureAck{}                           or Error
//	host → guest  ShutdownRequest{}                        (since 1.1)
//	guest → host  ShutdownAck{}, then the guest shuts down  or Error
//	host → guest  Session{user}                            (since 1.3)
//	guest → host  SessionAck{}, then SSH on the stream      or Error
//
// Configure hands the guest the plaintext of its instance's sealed
// spec.guestConfig, a Config in JSON (a CI runner's URL and token), which
// the host agent opened with its chassis' guest key (package sealing). The
// guest's Workload takes it and runs its one job; every Report then says
// configured, and the job's state. A guest that restarts says configured
// false again, and the host configures it again. The same Config twice is
// no change; a different one is refused with CodeConfigureFailed, as is any
// Configure to a guest that runs no workloads; the connection goes on. A
// Config holds secrets: it is never logged on either side, and prints
// redacted. Before a ShutdownRequest's shutdown, the guest stops its
// Workload, so that a job that runs is reported failed before the VM
// powers off.
//
// A Session (the SessionRequest message) turns the connection into an
// exec and logs session, once and for good: after the SessionAck no frame
// follows, and the stream carries an SSH connection, the host its client
// and the guest its server, with no deadlines (the frames' idle timeout
// does not apply) until either side closes it. SSH is only the channel
// multiplexer here: the stream is the VM's own vsock through its helper,
// so the VM boundary authenticates both ends; the guest's host key is an
// ephemeral ed25519 key no one checks, and it asks no credentials. Each
// command (Session.Exec) is a "session" channel: an optional "pty-req",
// its argv in an "exec-argv@macrack.io" request (JSON, never a shell
// string), stdin, stdout and stderr (extended data), "window-change", and
// "exit-status" or "exit-signal" back, or "exec-error@macrack.io" when
// nothing ran; the host closing the channel kills the command's process
// group. The guest agent's Journal streams on a "logs@macrack.io" channel
// (Session.Logs). The user a Session names is the guest login user the
// commands run as. The journal and the exec log argv[0] only: arguments,
// like a Config, may hold secrets.
//
// A port forward (Session.Forward) is a standard "direct-tcpip" channel to
// 127.0.0.1 and a port: the guest connects to that port on its own
// loopback (ServerOptions.Dial), and the channel carries the bytes both
// ways, each way's end as an EOF (a half-close), until both ended or
// either side closed. A port nothing listens on is refused with "connect
// failed" and a message that starts "connection refused", which the host
// tells as ErrPortClosed; a forward to any other host is prohibited. So
// the host reaches the guest's sshd (22) and Screen Sharing (5900) through
// the same session. The journal notes each forward's port as it opens and
// closes, never its bytes.
//
// The session's user's MacRack-managed SSH keys are set by the global
// request "authorized-keys@macrack.io" (Session.SetAuthorizedKeys), its
// payload JSON {"keys":[…]}: plain OpenSSH authorized_keys lines, the
// whole set, which replaces the previous one; none removes them. The
// guest (its KeyInstaller) validates them all before it installs any,
// refusing a set with a key that does not parse, holds options or a line
// break, by its index; its failure's payload is JSON {"message",
// "invalid"}. A real guest keeps them in the user's
// ~/.ssh/authorized_keys, between "# BEGIN MacRack managed keys" and "#
// END MacRack managed keys", beside the user's own. Every Report then
// says the digest of the set installed (authorizedKeysDigest,
// AuthorizedKeysDigest: sha256 hex of the sorted, trimmed lines joined by
// newlines), of the user keys were last set for, or of
// ServerOptions.LoginUser: a guest that restarted reports what it still
// has, and the host sends its keys again whenever the digest is not
// theirs. The journal says how many keys, never which.
//
// A host checks the guest's version in its HelloAck before it sends what
// the guest may not know: a ShutdownRequest to a 1.1 guest or later, a
// Configure to a 1.2 guest or later, a Session to a 1.3 guest or later.
// An older guest would close the connection on the unknown frame. What a
// newer guest adds to a Report an older host ignores.
//
// Every message is one frame: a 9-byte header then a JSON object.
//
//	offset size  field
//	0      3     magic "MRG"
//	3      1     frame format version (FrameVersion, 1)
//	4      1     message type (TypeHello … TypeSessionAck)
//	5      4     payload length, big-endian, 1 … MaxPayloadSize
//	9      n     payload: one UTF-8 JSON object
//
// The frame format version covers the header layout only; the message
// semantics are versioned by ProtocolVersion ("major.minor") in the
// handshake, and peers of different majors refuse each other.
//
// The transport is any net.Conn: vsock in production (Listen), net.Pipe or
// a Unix socket in tests, since vsock loopback does not work on Linux CI.
package guest
