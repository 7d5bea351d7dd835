// Package journal stands in for the pure journal a controller may link.
package journal

// Append is here so the lease fixture has something to import.
func Append(n int) int { return n + 1 }
