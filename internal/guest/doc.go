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
//	host → guest  ShutdownRequest{}                        (since 1.1)
//	guest → host  ShutdownAck{}, then the guest shuts down  or Error
//
// Every message is one frame: a 9-byte header then a JSON object.
//
//	offset size  field
//	0      3     magic "MRG"
//	3      1     frame format version (FrameVersion, 1)
//	4      1     message type (TypeHello … TypeError)
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
