// Package enforcement stands in for a registry that types must not import.
package enforcement

type Point struct{ Rule string }
