// Package phase reads the phase of an object whose status has none yet.
package phase

// Pending is the first phase of every MacRack kind that has one: a
// MacNode's, a MacOSInstance VM's.
const Pending = "Pending"

// OrPending returns p, or Pending when no status has set it yet: messages
// and Events name the phase an object is in, never an empty one.
func OrPending[P ~string](p P) P {
	if p == "" {
		return Pending
	}
	return p
}
