package lease

import "example.com/violation/internal/audit/journal"

// Name is here so the agent fixture has something to import.
const Name = "lease"

// Journal links the pure journal, which a controller may.
var Journal = journal.Append
