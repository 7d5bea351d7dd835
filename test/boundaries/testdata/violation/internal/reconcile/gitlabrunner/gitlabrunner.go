package gitlabrunner

import "example.com/violation/internal/index"

// Uses reads the operator's indexes, which a workload, acting as a tenant,
// may not.
var Uses = index.ByLease
