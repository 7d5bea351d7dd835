// Package jobloop is the one-job loop of a GitLabRunner VM, which the host
// agent runs (package agent/jobs), the runner token kept on the host: the
// VM takes exactly one GitLab CI job, runs it, reports it, and is then
// destroyed, so no job ever sees another's leftovers.
//
// RunOne is the project's own loop, the sim's: it polls jobs/request
// until a job comes, runs the job's steps through an Executor (the VM's
// exec channel, jobs.Executor; or SimExecutor, which interprets a tiny
// shell on the fleet simulator's clock), streams the trace with
// incremental PATCHes, and PUTs the final state. It speaks the same wire
// protocol as gitlab-runner (package gitlab) and follows its rules: the
// poll interval is check_interval's 3 s, a 416 resends from GitLab's
// offset, a job silent for 30 s is touched with a running update, the
// final update is tried 10 times with a backoff capped at 60 min, a 202
// on it is sent again after X-GitLab-Trace-Update-Interval, and a job the
// VM is stopped under is
// reported runner_system_failure (its host failed) or runner_interrupted
// (the runner was told to stop; unknown_failure where GitLab does not
// list it), which a retry: when: then retries on another VM.
//
// RunCommand is the loop on a real Mac: gitlab-runner run-single
// --max-builds 1, with the custom executor (package runner/custom), does
// the requesting, running and reporting itself, and RunCommand only starts
// it, never with the token in argv, and follows its log lines for the
// job's id and outcome. RunProcess is RunCommand with the shell executor.
//
// Neither ever logs or returns a token.
package jobloop
