# Sourced by the build scripts of make run's tools (hack/controlplane,
# hack/registry, hack/nats). A tool is rebuilt when the content of its
# inputs changes, never on timestamps: a bin/ copied from another machine
# or a fresh checkout has new mtimes and the same content. Each build is
# timed and its duration kept beside its output, so that the next cold
# build on this machine says how long it will take.

# inputs_hash FILE... -- WORD...: a SHA-256 over the files' content and
# the words (versions, flags, the Go toolchain), one line.
inputs_hash() {
  local files=() words=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do files+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  words=("$@")
  {
    for f in "${files[@]}"; do sha256sum < "$f"; done
    printf '%s\n' "${words[@]}"
    "${GO:-go}" version
  } | sha256sum | cut -d' ' -f1
}

# stamp_current BIN HASH SOURCE...: whether BIN is executable and was
# built from inputs of HASH (its stamp, BIN's directory/.BIN.inputs). A
# binary with no stamp yet that is newer than every SOURCE (the build
# scripts aside, which changed when stamps came) was built before stamps,
# by the old timestamp rule: it is adopted (stamped) once, not rebuilt.
stamp_current() {
  local bin=$1 hash=$2 stamp f
  shift 2
  stamp="$(dirname "$bin")/.$(basename "$bin").inputs"
  [ -x "$bin" ] || return 1
  if [ -f "$stamp" ]; then
    [ "$(cat "$stamp")" = "$hash" ]
    return
  fi
  for f in "$@"; do [ "$bin" -nt "$f" ] || return 1; done
  [ -n "${BUILD_DRY_RUN:-}" ] || stamp_write "$bin" "$hash"
}

# stamp_write BIN HASH records that BIN was built from inputs of HASH.
stamp_write() {
  printf '%s\n' "$2" > "$(dirname "$1")/.$(basename "$1").inputs"
}

# step_begin RECORD LABEL [FIRST]: says that LABEL builds now and how long
# it took on this machine last time (RECORD holds the seconds), or, on a
# first build, FIRST (what it took cold on a 2-core machine, README.md);
# and starts a timer.
step_begin() {
  local last
  if [ -s "$1" ] && last=$(cat "$1") && [ -n "$last" ]; then
    echo "$2 (took $(fmt_seconds "$last") on this machine last time)"
  elif [ -n "${3:-}" ]; then
    echo "$2 (a first build here; $3)"
  else
    echo "$2 (a first build here)"
  fi
  step_started=$SECONDS
}

# step_end RECORD LABEL: records how long the step took, and says so.
step_end() {
  local took=$((SECONDS - step_started))
  printf '%s\n' "$took" > "$1"
  echo "$2 done in $(fmt_seconds "$took")"
}

fmt_seconds() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}
