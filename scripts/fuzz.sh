#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang + ASan/UBSan in build-fuzz/ and runs
# each for a budget, then prints the executions and crashes per target. Not part of CI
# (CI replays the seed corpora in the normal build: ctest -L fuzz_replay).
#
# Usage: scripts/fuzz.sh [--time SECONDS] [--runs N] [--no-build] [TARGET...]
#   --time SECONDS  wall-clock budget per target (default 600)
#   --runs N        execution budget per target (default 1000000); the first reached ends it
#   --no-build      run what build-fuzz/ already has
#   TARGET          e.g. job_parser (default: every fuzz/<name>_fuzzer.cc)
# Each target reads its seeds from fuzz/corpus/<name>/ and keeps what it finds in
# build-fuzz/fuzz-corpus/<name>/; crashes are written to build-fuzz/fuzz-artifacts/<name>/
# (copy a fixed one into fuzz/corpus/<name>/ so the replay test keeps it fixed).
# Exits 1 when any target crashed.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

budget_s=600
runs=1000000
build=1
targets=()
while (($#)); do
  case "$1" in
    --time) budget_s="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  for f in fuzz/*_fuzzer.cc; do
    n="$(basename "$f")"
    targets+=("${n%_fuzzer.cc}")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -f "fuzz/${t}_fuzzer.cc" ]; then
    echo "fuzz.sh: no target ${t} (no fuzz/${t}_fuzzer.cc)" >&2
    exit 2
  fi
done

out=build-fuzz
if ((build)); then
  command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (Debian: apt-get install clang)" >&2; exit 1; }
  if [ ! -f "${out}/build.ninja" ]; then
    CC=clang CXX=clang++ cmake -S . -B "${out}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPEREGRINE_CUDA_ROOT="${PEREGRINE_CUDA_ROOT:-/usr/local/cuda}" \
      -DPEREGRINE_FUZZ=ON -DPEREGRINE_SANITIZE=address,undefined \
      -DPEREGRINE_BUILD_TESTS=OFF -DPEREGRINE_BUILD_BENCH=OFF >/dev/null
  fi
  ninja -C "${out}" "${targets[@]/%/_fuzzer}"
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
summary=()
for t in "${targets[@]}"; do
  bin="${out}/bin/fuzz/${t}_fuzzer"
  [ -x "${bin}" ] || { echo "fuzz.sh: ${bin} is not built" >&2; exit 1; }
  work="${out}/fuzz-corpus/${t}"
  artifacts="${out}/fuzz-artifacts/${t}"
  log="${out}/fuzz-logs/${t}.log"
  mkdir -p "${work}" "${artifacts}" "$(dirname "${log}")"
  echo "== ${t}: up to ${budget_s}s or ${runs} runs (log ${log})"
  stamp="${artifacts}/.run-started"
  touch "${stamp}"
  rc=0
  "${bin}" -max_total_time="${budget_s}" -runs="${runs}" -print_final_stats=1 \
    -artifact_prefix="${artifacts}/" "${work}" "fuzz/corpus/${t}" >"${log}" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "${log}" | tail -1)"
  # Only this run's findings: earlier runs' artifacts stay in the folder.
  crashes="$(find "${artifacts}" -maxdepth 1 -type f -newer "${stamp}" \( -name 'crash-*' -o -name 'leak-*' \
    -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)"
  if ((rc != 0)) || ((crashes > 0)); then
    status=1
    grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer)|runtime error|FUZZ_CHECK failed' "${log}" || true
  fi
  summary+=("$(printf '%-22s execs=%-10s crashes=%-3s exit=%s' "${t}" "${execs:-?}" "${crashes}" "${rc}")")
done
echo "== summary (${budget_s}s / ${runs} runs per target)"
printf '%s\n' "${summary[@]}"
exit "${status}"
