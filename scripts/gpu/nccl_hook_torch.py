"""One process of the GPU check: real NCCL through PyTorch, with or without the hook.

Usage: python3 nccl_hook_torch.py LABEL PORT

Runs a one-rank NCCL process group on cuda:0 and times dist.all_reduce on a 1-element
and a 64 MiB float32 tensor (wall time per call over many calls, synchronised at the
end, and CUDA-event time of the large call), printing one JSON line. The hook (when
LD_PRELOAD names libperegrine_nccl.so) records every call in its ring; gpu-check.sh
runs this once per configuration and compares the lines.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def timed(x, calls):
    for _ in range(20):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def event_ms(x, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(calls):
        start.record()
        dist.all_reduce(x)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    samples.sort()
    return samples[len(samples) // 2]


def main():
    label, port = sys.argv[1], sys.argv[2]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = port
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    small = torch.ones(1, device="cuda")
    large = torch.ones(16 << 20, device="cuda")  # 64 MiB of float32
    out = {
        "label": label,
        "nccl_version": ".".join(str(v) for v in torch.cuda.nccl.version()),
        "torch": torch.__version__,
        "small_us_per_call": timed(small, 3000) * 1e6,
        "large_us_per_call": timed(large, 200) * 1e6,
        "large_event_ms_median": event_ms(large, 50),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
    }
    dist.destroy_process_group()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
