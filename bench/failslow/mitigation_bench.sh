#!/usr/bin/env bash
# Fail-slow mitigation, measured on the local cluster: the share of a fail-slow's slowdown
# that mitigation Auto removes over a whole run (detection, validation and escalation time
# included), for three faults: one GPU 3x slower, a congested inter-machine link (20 ms per
# message), two GPUs 3x slower on different machines sharing no group.
#
# The job is the local demo reshaped to TP=1 PP=2 DP=4 (4 machines x 2 GPUs; one warm
# standby, checkpoints every 10 steps) running STEPS steps. Per fault, two runs with the
# fault injected at step AT: mitigation MonitorOnly (the fault's cost) and Auto; plus one
# healthy run, the baseline. Each figure is the controller's whole run, start to finish,
# so its fixed set-up cancels in the differences:
#     removed = (T_monitor - T_auto) / (T_monitor - T_healthy)
# One run each: on a shared 2-core machine expect a few seconds of noise per run.
#
# STARTUP_MS (default 0) gives every trainer process that start-up (sim-trainer
# --startup-ms), a stand-in for a real trainer's imports and model loading: with
# sim-trainer's own 0.2 s a restart is so cheap that the ladder rightly goes to S4 at once;
# with seconds of start-up, as on a real cluster, S2 comes first.
#
# Usage: bench/failslow/mitigation_bench.sh [STEPS (default 300)] [AT (default 60)] [STARTUP_MS (default 0)]
#        [SCENARIOS (default: all three, space-separated)]
# Needs a built tree (scripts/setup.sh); prints one line per fault and the ladder's actions.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
controller="${repo_root}/build/bin/peregrine-controller"
steps="${1:-300}"
at="${2:-60}"
startup_ms="${3:-0}"
scenarios="${4:-failslow-slow-rank failslow-congested-link failslow-two-slow-ranks}"
work="$(mktemp -d "${TMPDIR:-/tmp}/peregrine-mitigation-bench-XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# The job: the demo with DP=4 and the chosen mitigation.
job() {
  sed -e 's/^    tensor: 2$/    tensor: 1/' -e 's/^    data: 2$/    data: 4/' \
      -e "s/\"--steps\", \"300\"/\"--steps\", \"${steps}\", \"--startup-ms\", \"${startup_ms}\"/" \
      -e "s/^    mitigation: Auto$/    mitigation: $1/" "${repo_root}/examples/local-demo.yaml" > "${work}/job-$1.yaml"
  grep -q "data: 4" "${work}/job-$1.yaml" && grep -q "mitigation: $1" "${work}/job-$1.yaml" || {
    echo "mitigation_bench: could not reshape examples/local-demo.yaml" >&2; exit 2; }
  echo "${work}/job-$1.yaml"
}

# Runs the controller; prints its wall seconds; its output goes to $2.log.
run() {
  local yaml="$1" name="$2"; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  if ! "${controller}" --local "${yaml}" --state-dir "${work}/${name}" "$@" > "${work}/${name}.log" 2>&1; then
    echo "mitigation_bench: run ${name} failed; its output:" >&2
    tail -n 30 "${work}/${name}.log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  awk -v a="${t0}" -v b="${t1}" 'BEGIN { printf "%.3f", b - a }'
}

# What the ladder did in a run, from its timeline.
actions() {
  local log="$1"
  local s2 s4
  s2=$(grep -c "MicroBatchPlanInForce" "${log}" || true)
  s4=$(grep -c "fail-slow mitigation S4" "${log}" || true)
  echo "S2 plans in force: ${s2}, S4 replacements: ${s4}"
}

monitor_job=$(job MonitorOnly)
auto_job=$(job Auto)
healthy=$(run "${monitor_job}" healthy)
printf 'mitigation_bench: %d steps, TP=1 PP=2 DP=4, trainer start-up %d ms, fault at step %d, healthy run %.1f s\n' \
  "${steps}" "${startup_ms}" "${at}" "${healthy}"
for scenario in ${scenarios}; do
  monitor=$(run "${monitor_job}" "${scenario}-monitor" --scenario "${scenario}" --at-step "${at}")
  auto=$(run "${auto_job}" "${scenario}-auto" --scenario "${scenario}" --at-step "${at}")
  removed=$(awk -v m="${monitor}" -v a="${auto}" -v h="${healthy}" 'BEGIN { printf "%.1f", (m - a) / (m - h) * 100 }')
  printf 'mitigation_bench: %-26s healthy %6.1f s, fault+MonitorOnly %6.1f s, fault+Auto %6.1f s: slowdown %+.1f s, removed %5.1f%% (%s)\n' \
    "${scenario}" "${healthy}" "${monitor}" "${auto}" "$(awk -v m="${monitor}" -v h="${healthy}" 'BEGIN { print m - h }')" "${removed}" \
    "$(actions "${work}/${scenario}-auto.log")"
done
