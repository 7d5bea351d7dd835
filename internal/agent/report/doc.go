// Package report owns the host agent's status.reported on its MacNode.
//
// The agent has several sources of that report: the facts, the instance
// loop's quota, the reaper's inventory, the golden cache and the wipes.
// Each publishes its part into one Reporter, which composes them and sends
// one coalesced merge patch of what changed since its last write. The
// sources never write the MacNode, nor know of one another: which field is
// whose is the Reporter's composition, in one place.
package report
