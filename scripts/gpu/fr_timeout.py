"""A collective that times out, so that PyTorch's NCCL watchdog writes its flight recorder
dump as it does in production (TORCH_NCCL_DUMP_ON_TIMEOUT=1, file
TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank). One rank on one GPU: a 20 s GPU sleep queued
before an all_reduce keeps the collective from completing past the group's 5 s timeout.
The watchdog then aborts the process (that is expected: the exit code is not 0).

Usage: TORCH_NCCL_DEBUG_INFO_TEMP_FILE=OUT/nccl_trace_rank_ python3 fr_timeout.py"""
import datetime
import os
import time

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29541")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"),
                        timeout=datetime.timedelta(seconds=5))
x = torch.ones(1 << 20, device="cuda")
for _ in range(5):
    dist.all_reduce(x)
    dist.broadcast(x, src=0)
torch.cuda.synchronize()
print("healthy collectives done; queueing a 20 s GPU sleep before an all_reduce", flush=True)
torch.cuda._sleep(int(20 * 1.98e9))  # cycles at the H200's boost clock
dist.all_reduce(x)
time.sleep(60)  # the watchdog times the all_reduce out, dumps, and aborts the process
print("the watchdog did not abort the process", flush=True)
