// Package instances is the host agent's instance loop: it runs the
// instances placed on its chassis in VM helpers, only for those a slot of
// its MacNode names, clones and wipes their disks, and reaps and reports
// what the chassis holds.
package instances
