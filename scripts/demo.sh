#!/usr/bin/env bash
# The local demo (README, first command): sets up and builds, then runs a 4-machine x
# 2-GPU job (TP=2 PP=2 DP=2) with one warm standby on the embedded local cluster. At
# step 100 a machine is killed; the controller evicts it, activates the standby in its
# slot, restarts the other machines in place and training finishes. It prints the
# incident timeline. About a minute on 2 cores.
#
# Usage: scripts/demo.sh [extra peregrine-controller flags, e.g. --scenario crash]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${repo_root}/scripts/setup.sh"
state_dir="$(mktemp -d "${TMPDIR:-/tmp}/peregrine-demo-XXXXXX")"
echo "demo: state, pod logs and events in ${state_dir}"
exec "${repo_root}/build/bin/peregrine-controller" --local "${repo_root}/examples/local-demo.yaml" \
  --state-dir "${state_dir}" --scenario kill-machine --at-step 100 "$@"
