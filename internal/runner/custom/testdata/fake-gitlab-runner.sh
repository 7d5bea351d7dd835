#!/bin/sh
# A stand-in for gitlab-runner run-single with the custom executor, for
# RunJob's tests. It records its argv, environment, config file and the
# system id beside it to $FAKE_RUNNER_RECORD, then runs a job through the
# stages its config file names, as executors/custom does (stage args
# first, then the script and the sub-stage for run), and logs the outcome
# as gitlab-runner does.

record="${FAKE_RUNNER_RECORD:?}"
config=""
prev=""
for a in "$@"; do
	[ "$prev" = "--config" ] && config="$a"
	prev="$a"
done
{
	printf 'argv:'
	for a in "$@"; do printf ' %s' "$a"; done
	printf '\n'
	env | sort
	printf 'config-mode: %s\n' "$(stat -c %a "$config" 2>/dev/null || stat -f %Lp "$config")"
	printf 'system-id: %s\n' "$(cat "$(dirname "$config")/.runner_system_id")"
	cat "$config"
} > "$record"

stage=$(sed -n 's/^ *run_exec = "\(.*\)"$/\1/p' "$config")
token=$(sed -n 's/^ *token = "\(.*\)"$/\1/p' "$config")
short=$(printf '%s' "$token" | sed -e 's/^glrt-t[123]_//' | cut -c1-9)
echo "Starting runner for $(sed -n 's/^ *url = "\(.*\)"$/\1/p' "$config") with token $short ..." >&2
echo "Checking for jobs... received                       job=5151 repo_url=https://gitlab.example.com/group/project.git runner=$short" >&2

tmp=$(mktemp -d)
export TMPDIR="$tmp" BUILD_FAILURE_EXIT_CODE=1 SYSTEM_FAILURE_EXIT_CODE=2 BUILD_EXIT_CODE_FILE="$tmp/build_exit_code"
export CUSTOM_ENV_CI_JOB_ID=5151
"$stage" config > "$tmp/config.json" || { echo "ERROR: Job failed (system failure): config job=5151 failure_reason=runner_system_failure" >&2; exit 0; }
"$stage" prepare || { echo "ERROR: Job failed (system failure): prepare job=5151 failure_reason=runner_system_failure" >&2; exit 0; }
printf '%s\n' '#!/usr/bin/env bash' 'set -eo pipefail' "${FAKE_JOB_SCRIPT:-true}" > "$tmp/script"
"$stage" run "$tmp/script" build_script
rc=$?
"$stage" cleanup
rm -rf "$tmp"
if [ $rc -eq 0 ]; then
	echo "Job succeeded                                       duration_s=0.5 job=5151 project=7 runner=$short" >&2
else
	echo "WARNING: Job failed: exit code 1                    duration_s=0.5 exit_code=1 failure_reason=script_failure job=5151 project=7 runner=$short" >&2
fi
