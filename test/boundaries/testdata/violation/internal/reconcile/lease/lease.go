package lease

// Name is here so the agent fixture has something to import.
const Name = "lease"
