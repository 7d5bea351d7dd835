package guest

// DefaultPort is the vsock port the guest agent listens on and the host
// agent dials (through the VM helper's DialGuest) at the VM's context ID.
// Ports below 1024 are privileged on Linux guests; 1024 is the first free one.
const DefaultPort uint32 = 1024
