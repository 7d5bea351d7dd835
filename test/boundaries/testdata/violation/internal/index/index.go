package index

// ByLease is here so the runner fixture has something to import.
const ByLease = "by-lease"
