// Package sealing seals a guest's configuration to one chassis' guest key
// and opens it there: HPKE (RFC 9180) base mode with DHKEM(X25519,
// HKDF-SHA256), HKDF-SHA256 and AES-256-GCM, from the standard library's
// crypto/hpke.
//
// Any host agent can read every MacOSInstance (RBAC cannot filter reads),
// so a secret a guest needs (a CI runner's token) travels in the instance's
// spec.guestConfig sealed: the workload controller seals it to the public
// key the chassis' agent publishes in its MacNode's status.reported.guestKey,
// and only that agent, holding the private half, can open it and hand it to
// its guest over vsock. The HPKE info string binds the seal to one instance
// (namespace and name) on one node, so a blob copied onto another instance,
// or onto an instance placed on another chassis, does not open.
//
// The package never logs, and never prints a private key or a plaintext.
package sealing
