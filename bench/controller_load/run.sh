#!/usr/bin/env bash
# The controller load test at full size: 12,500 simulated agents (100,000 GPUs at 8 per
# machine) against one peregrine-controller in Kubernetes mode and the fake API server,
# then 1% of the machines failed at once. Builds what it needs, raises the open-file
# limit (each agent holds a connection: about 12,500 descriptors in this process and as
# many in the controller), and prints the figures beside the issue's budgets.
#
# Usage: bench/controller_load/run.sh [--build DIR] [--no-build] [controller-load flags...]
#   e.g. bench/controller_load/run.sh --agents 2000 --steady-s 30
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${root}/build"
do_build=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ "${do_build}" = 1 ]; then
  ninja -C "${build}" controller-load peregrine-controller
fi
hard="$(ulimit -Hn)"
want=32768
if [ "${hard}" != unlimited ] && [ "${hard}" -lt "${want}" ]; then want="${hard}"; fi
ulimit -n "${want}"
if [ "${want}" -lt 26000 ]; then
  echo "run.sh: open-file limit ${want}: 12,500 agents need about 12,600 in each process" >&2
fi
exec "${build}/bin/controller-load" "${args[@]}"
