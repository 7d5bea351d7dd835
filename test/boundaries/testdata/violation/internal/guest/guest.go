package guest

// Clean imports nothing from the operator.
const Clean = true
