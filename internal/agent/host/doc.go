// Package host is the host agent's chassis-wide part: it registers the
// chassis' Node, heartbeats through its Lease in kube-node-lease, reports the
// hardware facts on its MacNode, and renews the agent's own token. It writes
// only what agent.scope lets an agent write of its own chassis.
package host
