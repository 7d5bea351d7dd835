package guest

import "context"

// Workload is what a guest runs once the host configured it: a CI
// runner's one job (package jobloop). The guest agent's Server drives it:
// Configure on a Configure, Status on every ReportRequest, Stop before a
// ShutdownRequest's Shutdown.
//
// Its errors go to the host, which logs them: they must never quote the
// Config's secrets.
type Workload interface {
	// Configure takes the guest's Config, already validated, and starts
	// the workload; it returns once the Config is taken, not when the job
	// ends. ctx bounds the call only (ConfigureTimeout): the workload's own
	// work must not end with it. It is idempotent for an equal Config (the host
	// sends it again when a report was lost), and refuses a different one
	// with an error wrapping ErrAlreadyConfigured: one VM, one job.
	// OneConfig implements that rule.
	Configure(ctx context.Context, c Config) error
	// Status is whether a Config was taken, and the job's state: what a
	// Report says.
	Status() (configured bool, job *JobReport)
	// Stop ends the workload before the guest shuts down, within ctx: a
	// job that runs is reported to the CI system as a system failure, and
	// as Failed in Status, before the VM powers off. The guest shuts down
	// whatever it returns.
	Stop(ctx context.Context) error
}
