#!/usr/bin/env bash
# A network partition between the agents and the controller, end to end, for as long as
# you like (tests/e2e/partition): the real local-mode controller, agents and sim-trainer
# ranks, every agent dialing the controller through a loopback TCP proxy that is
# blackholed (connections kept open, nothing read or forwarded either way) for the given
# time while training runs, then healed. Prints the "partition:" line: evictions (during
# the blackhole and in all), incidents, the steps every rank completed during the
# blackhole (from the ranks' own log files) and how the job ended; exits 1 when the test
# failed (an eviction, no step during the blackhole, the job not finishing). Not part of
# CI (CI runs the same test with a 30 s blackhole: ctest -R partition).
#
# Usage: scripts/partition.sh [--seconds N] [--no-build]
#   --seconds N   blackhole duration (default 300)
#   --no-build    use what build/ has
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=300 build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "usage: scripts/partition.sh [--seconds N] [--no-build]" >&2; exit 2 ;;
  esac
done
if ! [[ "${seconds}" =~ ^[1-9][0-9]*$ ]]; then
  echo "scripts/partition.sh: --seconds must be a positive whole number, not '${seconds}'" >&2
  exit 2
fi
if [[ "${build}" == 1 ]]; then
  ninja -C "${root}/build" partition_e2e_tests >/dev/null
fi
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
status=0
PEREGRINE_PARTITION_SECONDS="${seconds}" "${root}/build/tests/partition_e2e_tests" \
  "A blackholed agent-controller link evicts nothing*" \
  >"${log}" 2>&1 || status=1
if ! grep '^partition:' "${log}"; then status=1; fi
if [[ "${status}" != 0 ]]; then cat "${log}"; fi
exit "${status}"
