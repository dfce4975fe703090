#!/usr/bin/env bash
# The GPU check: what the CPU-only test suite cannot run, run on a machine with an NVIDIA GPU,
# CUDA, PyTorch with NCCL and the project's binaries already built (this script builds
# nothing). Everything it prints is a measurement of that machine; nothing is compared with a
# stored figure.
#   1. nvidia-smi as the agent's GPU inspection and kernel-log reader run it (the exact query
#      strings of agent/inspection/), saved under OUT for the parsers' real-format tests;
#   2. peregrine-gemm on the GPU (cuBLAS through dlopen), every dtype, against its CPU path;
#   3. libperegrine_nccl.so preloaded into PyTorch's real NCCL: the same all-reduce loop
#      plain, hooked (recording) and hooked with profiling (CUDA events), per-call cost and
#      ratio, and each ring summarised (calls recorded, CUDA-event state, device times
#      against PyTorch's own CUDA-event timing);
#   4. with PYTHON_DIR: the checkpoint client's Python tests (tests/client/test_checkpoint.py)
#      on that machine's PyTorch, CUDA tensors included.
# Usage: scripts/gpu/gpu-check.sh BIN_DIR LIB_DIR OUT_DIR [PYTHON_DIR]
#   BIN_DIR holds peregrine-gemm and peregrine-finish-shard; LIB_DIR holds
#   libperegrine_nccl.so and libperegrine_client.so (and, when the binaries were built on
#   another distribution, the shared libraries they need); PYTHON_DIR the build's python/.
set -uo pipefail
bin=$(cd "$1" && pwd); lib=$(cd "$2" && pwd); out=$3; pydir=${4:+$(cd "$4" && pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
py=${PYTHON:-python3}

echo "== 1. nvidia-smi"
nvidia-smi
query=$(sed -n '/kNvidiaSmiQuery\[\] =/,/;/p' "$here/../../agent/inspection/gpu_inspection.h" |
        grep -o '"[^"]*"' | tr -d '"\n')
echo "query: $query"
nvidia-smi --query-gpu="$query" --format=csv,noheader,nounits >"$out/nvidia_smi_query.csv" 2>&1
echo "exit $? (the agent's query)"; cat "$out/nvidia_smi_query.csv"
nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader >"$out/nvidia_smi_bus_id.txt" 2>&1
echo "exit $? (bus ids)"; cat "$out/nvidia_smi_bus_id.txt"
if command -v dcgmi >/dev/null; then dcgmi health -c >"$out/dcgmi_health.txt" 2>&1; else echo "no dcgmi"; fi
echo "kernel log (last lines):"; dmesg 2>&1 | tail -n 20

echo "== 2. peregrine-gemm"
cuda_dirs=$($py - <<'PY'
import glob, os, site
dirs = set()
for root in site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]:
    for pat in ("libcudart.so*", "libcublas.so*", "libcublasLt.so*", "libnccl.so*"):
        for f in glob.glob(os.path.join(root, "**", pat), recursive=True):
            dirs.add(os.path.dirname(f))
print(":".join(sorted(dirs)))
PY
)
echo "CUDA library folders: $cuda_dirs"
export LD_LIBRARY_PATH="$lib:$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tool's default size (what the validation runs) and a size that fills the GPU.
{ "$bin/peregrine-gemm" --seconds 2; "$bin/peregrine-gemm" --n 8192 --seconds 2
  "$bin/peregrine-gemm" --cpu --seconds 2; } | tee "$out/gemm.jsonl"

echo "== 3. the hook under PyTorch's NCCL"
rings=$(mktemp -d); mkdir -p "$rings/rec" "$rings/prof"
export PYTHONUNBUFFERED=1
$py "$here/nccl_hook_torch.py" plain 29511 | tee "$out/hook_plain.json"
LD_PRELOAD="$lib/libperegrine_nccl.so" PEREGRINE_NCCL_RING_DIR="$rings/rec" RANK=0 LOCAL_RANK=0 \
  $py "$here/nccl_hook_torch.py" hooked 29512 | tee "$out/hook_hooked.json"
LD_PRELOAD="$lib/libperegrine_nccl.so" PEREGRINE_NCCL_RING_DIR="$rings/prof" PEREGRINE_NCCL_PROFILING=1 RANK=0 \
  LOCAL_RANK=0 $py "$here/nccl_hook_torch.py" profiled 29513 | tee "$out/hook_profiled.json"
for d in rec prof; do
  for f in "$rings/$d"/*; do
    echo "ring ($d): $f"
    case "$f" in *.ring) $py "$here/ring_summary.py" "$f" | tee -a "$out/rings.jsonl" ;; *) cat "$f" ;; esac
  done
done
$py - "$out" <<'PY'
import json, sys
out = sys.argv[1]
runs = {k: json.load(open(f"{out}/hook_{k}.json")) for k in ("plain", "hooked", "profiled")}
p = runs["plain"]
for k in ("hooked", "profiled"):
    r = runs[k]
    print(f"{k}: small all-reduce {r['small_us_per_call']:.2f} us/call vs plain {p['small_us_per_call']:.2f} "
          f"(+{r['small_us_per_call'] - p['small_us_per_call']:.2f} us, ratio {r['small_us_per_call'] / p['small_us_per_call']:.3f}); "
          f"64 MiB {r['large_us_per_call']:.1f} vs {p['large_us_per_call']:.1f} us/call "
          f"(ratio {r['large_us_per_call'] / p['large_us_per_call']:.3f})")
for line in open(f"{out}/rings.jsonl"):
    s = json.loads(line)
    dev = s["allreduce_device_time_by_count"].get(str(16 << 20))
    if dev:
        print(f"ring {s['ring']}: CUDA-event device time of the 64 MiB all-reduce, median {dev['median_us']:.1f} us over "
              f"{dev['n']} calls; PyTorch's CUDA events (profiled run): {runs['profiled']['large_event_ms_median'] * 1e3:.1f} us")
PY
rm -rf "$rings"

if [[ -n "$pydir" ]]; then
  echo "== 4. the checkpoint client on this machine's PyTorch"
  (cd "$here/../../tests/client" &&
   PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$pydir" PEREGRINE_CLIENT_LIB="$lib/libperegrine_client.so" \
   PEREGRINE_FINISH_SHARD="$bin/peregrine-finish-shard" $py -m unittest -v test_checkpoint 2>&1)
  echo "exit $?"
fi
echo "== done"
