#!/usr/bin/env bash
# Real-format NCCL traces from a GPU machine for the offline analyses' fixtures: the
# NCCL_DEBUG=INFO log of PyTorch's NCCL (INIT and COLL subsystems, with timestamps), the
# flight recorder's pickle and a torch.profiler trace (scripts/gpu/real_traces.py).
# Usage: scripts/gpu/real-traces.sh OUT_DIR   (python3 must hold PyTorch with CUDA)
set -uo pipefail
out=$1; here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
# NCCL writes its log to stdout unless NCCL_DEBUG_FILE names a file.
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL NCCL_DEBUG_TIMESTAMP_LEVELS=INFO NCCL_DEBUG_FILE="$out/nccl_debug_rank0.log" \
  NCCL_DEBUG_TIMESTAMP_FORMAT='[%F %T.%6f] ' PYTHONUNBUFFERED=1 \
  ${PYTHON:-python3} "$here/real_traces.py" "$out"
rc=$?
echo "exit $rc"; ls -l "$out"
exit $rc
