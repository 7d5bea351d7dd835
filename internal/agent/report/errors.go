package report

import "errors"

// ErrReport wraps every failed write of the report.
var ErrReport = errors.New("reporting on the MacNode")
