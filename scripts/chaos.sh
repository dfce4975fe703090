#!/usr/bin/env bash
# The full chaos run of the operator (tests/e2e/chaos): the real peregrine-controller
# process against the in-test fake API server, SIGKILLed at >= 200 random moments (seeded,
# the seed printed) while a machine fails, and once right after each API write of a
# recovery, restarted each time. Prints the counts (kills, restarts, deletes, evictions,
# cordons, violations) and every violation; exits 1 when there was one. Not part of CI
# (CI runs the same suite with a few kill points: ctest -R chaos).
#
# --local does the same to `peregrine-controller --local` (real agent processes and
# sim-trainer ranks on the embedded local cluster): random kills only, counting kills,
# restarts, evictions, duplicate agents or training ranks, and violations.
#
# Usage: scripts/chaos.sh [--local] [--seed N] [--kills N] [--write-kills N] [--rounds N] [--no-build]
#   --local          local mode instead of the Kubernetes mode (--write-kills is ignored)
#   --seed N         first seed (default: the time); round i uses seed N+i
#   --kills N        random kills per round (default 50)
#   --rounds N       rounds of random kills, each a fresh job (default 4: 200 kills)
#   --write-kills N  kill after each of the first N writes of the recovery (default 40;
#                    stops earlier when the recovery needs fewer writes)
#   --log-level L    the Kubernetes-mode controller's --log-level (default error; info shows
#                    each round's decisions in a failure's message)
#   --no-build       use what build/ has
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seed="$(date +%s)" kills=50 rounds=4 write_kills=40 build=1 local=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seed) seed="$2"; shift 2 ;;
    --kills) kills="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --write-kills) write_kills="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --local) local=1; shift ;;
    --log-level) log_level="$2"; shift 2 ;;
    *) echo "usage: scripts/chaos.sh [--local] [--seed N] [--kills N] [--rounds N] [--write-kills N] [--log-level L] [--no-build]" >&2; exit 2 ;;
  esac
done
if [[ "${build}" == 1 ]]; then
  ninja -C "${root}/build" chaos_tests peregrine-controller peregrine-agent sim-trainer peregrine_sim_device >/dev/null
fi
bin="${root}/build/tests/chaos_tests"
log="$(mktemp)" lines="$(mktemp)"
trap 'rm -f "${log}" "${lines}"' EXIT
status=0
run() {  # runs the suite with the environment given, keeps its "chaos:" lines
  env "$@" >"${log}" 2>&1 || status=1
  if grep '^chaos:' "${log}" | tee -a "${lines}"; then :; else cat "${log}"; status=1; fi
}
export PEREGRINE_CHAOS_LOG_LEVEL="${log_level:-error}"  # the Kubernetes-mode controller's --log-level
if [[ "${local}" == 1 ]]; then
  for ((i = 0; i < rounds; i++)); do
    run PEREGRINE_CHAOS_SEED=$((seed + i)) PEREGRINE_CHAOS_KILLS="${kills}" "${bin}" "Local chaos: *"
  done
  keys="kills restarts evictions duplicates violations"
else
  for ((i = 0; i < rounds; i++)); do
    run PEREGRINE_CHAOS_SEED=$((seed + i)) PEREGRINE_CHAOS_KILLS="${kills}" \
      "${bin}" "Chaos: the controller SIGKILLed at random moments*"
  done
  run PEREGRINE_CHAOS_MAX_WRITE_KILLS="${write_kills}" "${bin}" "Chaos: the controller SIGKILLed right after each API write*"
  keys="kills restarts deletes evictions cordons violations"
fi
awk -v keys="${keys}" '/^chaos: .*violations=/ {
       for (i = 1; i <= NF; i++) if (split($i, kv, "=") == 2) t[kv[1]] += kv[2]
     }
     END { n = split(keys, k, " "); line = "chaos: total:"
           for (i = 1; i <= n; i++) line = line " " k[i] "=" (t[k[i]] + 0)
           print line }' "${lines}"
exit "${status}"
