package sealing

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrWrongKey means a sealed config names another key than this one:
	// it was sealed to another chassis, or to a key this agent replaced.
	ErrWrongKey = errors.New("sealed to another key")
	// ErrUnreadable means a sealed config that names this key but does not
	// open: not base64, too short or too long, or it fails authentication
	// (sealed for another instance or node, to another key under a forged
	// key id, or altered).
	ErrUnreadable = errors.New("sealed config does not open")
	// ErrInvalidKey means a public key that cannot be sealed to: another
	// algorithm, not 32 bytes of base64, or a keyID that is not its own.
	ErrInvalidKey = errors.New("invalid guest key")
	// ErrInvalidBinding means a Binding with an empty part or a part that
	// holds a NUL, which would make two bindings' info strings collide.
	ErrInvalidBinding = errors.New("invalid binding")
	// ErrTooLarge means a plaintext over MaxPlaintext, whose seal would not
	// fit the schema's bound on spec.guestConfig.sealed.
	ErrTooLarge = errors.New("plaintext too large to seal")
	// ErrKeyFile means a private key file that must not be used: not a
	// regular file, readable or writable by others than its owner, or not
	// exactly one key long.
	ErrKeyFile = errors.New("unusable guest key file")
)
