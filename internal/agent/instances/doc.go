// Package instances is the host agent's instance loop: it runs the
// instances placed on its chassis in VM helpers, only for those a slot of
// its MacNode names, clones and wipes their disks, and reaps and reports
// what the chassis holds. It also does the agent's half of the quota-stuck
// quarantine loop (quarantine.go): it reports a stuck quota for its boot,
// stops the VMs of a quarantined chassis gently (stop.go), reboots the
// host when the operator asks, and probes the quota after (probe.go).
package instances
