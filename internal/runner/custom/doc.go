// Package custom runs a GitLab runner's jobs with gitlab-runner's custom
// executor, so that the runner token never enters a VM.
//
// The host agent keeps the token. For each job it starts gitlab-runner
// run-single on the host (RunJob) with the custom executor, whose four
// stages are one small binary, macrack-runner-stage (Main). The stages
// reach the job's VM only through a Unix socket the agent serves per job
// (StageServer), and send it nothing but the scripts gitlab-runner wrote:
// job variables, the short-lived CI_JOB_TOKEN among them, are in those
// scripts; the runner token is only in gitlab-runner's environment and
// config file, which the stages inherit and never forward.
//
// The contract is gitlab-runner's docs/executors/custom.md and
// executors/custom (18.1 or later): stage arguments, CUSTOM_ENV_*,
// BUILD_FAILURE_EXIT_CODE, SYSTEM_FAILURE_EXIT_CODE and
// BUILD_EXIT_CODE_FILE, and SIGTERM then SIGKILL to the stage's process
// group on a timeout or a cancelled job.
package custom
