#!/bin/sh
# A stand-in for gitlab-runner run-single, for RunProcess's tests. It
# records its argv and environment to $FAKE_RUNNER_RECORD, then logs as
# gitlab-runner 17.x does (log/runner_formatter.go: the message padded to
# 50 columns, then sorted key=value fields) the outcome that
# $FAKE_RUNNER_OUTCOME names: success, failed, none, forbidden or hang.

record="${FAKE_RUNNER_RECORD:?}"
{
	printf 'argv:'
	for a in "$@"; do printf ' %s' "$a"; done
	printf '\n'
	env | sort
	if [ -n "$CI_SERVER_TLS_CA_FILE" ]; then
		printf 'ca-file-content:'
		cat "$CI_SERVER_TLS_CA_FILE"
		printf '\n'
	fi
} > "$record"

# gitlab-runner's ShortDescription: the token without its prefix, 9 chars.
short=$(printf '%s' "$CI_SERVER_TOKEN" | sed -e 's/^glrt-t[123]_//' -e 's/^glrt-//' | cut -c1-9)

echo "Runtime platform                                    arch=arm64 os=darwin pid=$$ revision=abcdef12 version=17.11.0" >&2
echo "Starting runner for $CI_SERVER_URL with token $short ..." >&2

case "${FAKE_RUNNER_OUTCOME:?}" in
success)
	echo "Checking for jobs... received                       job=4242 repo_url=https://gitlab.example.com/group/project.git runner=$short" >&2
	echo "Appending trace to coordinator...ok                 code=202 job=4242 job-log=0-120 job-status=running runner=$short sent-log=0-119 status=202 Accepted update-interval=3s" >&2
	echo "Job succeeded                                       duration_s=1.5 job=4242 job-status=success project=7 runner=$short" >&2
	echo "This runner has processed its build limit, so now exiting" >&2
	;;
failed)
	echo "Checking for jobs... received                       job=4243 repo_url=https://gitlab.example.com/group/project.git runner=$short" >&2
	printf 'WARNING: \033[0;33mJob failed: exit code 3\033[0;m                    duration_s=0.5 exit_code=3 failure_reason=script_failure job=4243 job-status=failed project=7 runner=%s\n' "$short" >&2
	;;
none)
	echo "This runner has not received a job in 1 seconds, so now exiting" >&2
	;;
forbidden)
	echo "ERROR: Checking for jobs... forbidden                runner=$short status=POST https://gitlab.example.com/api/v4/jobs/request: 403 Forbidden" >&2
	# gitlab-runner waits NotHealthyCheckInterval (300 s) before asking again.
	# The sleep does not hold the log pipes, so a SIGTERM ends the output.
	sleep 30 >/dev/null 2>&1 &
	wait $!
	;;
hang)
	trap 'kill $job 2>/dev/null; echo "WARNING: Requested exit: terminated" >&2; echo "ERROR: Job failed (system failure): aborted: terminated  duration_s=0.2 failure_reason=runner_system_failure job=4244 job-status=failed project=7 runner=$short" >&2; exit 0' TERM
	sleep 30 >/dev/null 2>&1 &
	job=$!
	echo "Checking for jobs... received                       job=4244 repo_url=https://gitlab.example.com/group/project.git runner=$short" >&2
	wait $job
	;;
esac
