"""Real-format traces from PyTorch's NCCL on a GPU machine, for the offline analyses'
fixtures (peregrinectl analyze nccl / analyze fr). One process, one rank, one GPU: NCCL
refuses two ranks of one communicator on one device, so these traces show the formats, not
a multi-rank hang.

Usage (with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL in the environment to log calls):
  python3 real_traces.py OUT_DIR
Writes OUT_DIR/fr_rank0.pkl (the flight recorder's pickle, as PyTorch dumps it),
OUT_DIR/kineto_rank0.json (torch.profiler's Chrome trace with CUDA kernels) and prints
what it did as JSON lines."""
import json
import os
import sys

os.environ.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000")
os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def say(**kw):
    print(json.dumps(kw), flush=True)


def collectives(n, size):
    x = torch.ones(size, device="cuda")
    outs = [torch.empty_like(x)]
    for _ in range(n):
        dist.all_reduce(x)
        dist.broadcast(x, src=0)
        dist.all_gather(outs, x)
        dist.reduce_scatter_tensor(torch.empty_like(x), x)
        dist.barrier()
    torch.cuda.synchronize()


def dump_fr():
    names = [("torch._C._distributed_c10d", "_dump_nccl_trace"),
             ("torch._C._distributed_c10d", "_dump_fr_trace")]
    for mod_name, fn_name in names:
        mod = sys.modules.get(mod_name) or __import__(mod_name, fromlist=[fn_name])
        fn = getattr(mod, fn_name, None)
        if fn is None:
            continue
        try:
            return fn_name, fn()
        except TypeError:
            return fn_name, fn(True, True, False)
    raise RuntimeError("no flight recorder dump function in this PyTorch")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    say(torch=torch.__version__, nccl=".".join(map(str, torch.cuda.nccl.version())),
        device=torch.cuda.get_device_name(0))
    collectives(10, 1 << 20)
    try:
        fn, blob = dump_fr()
        with open(os.path.join(out, "fr_rank0.pkl"), "wb") as f:
            f.write(blob)
        say(flight_recorder=fn, bytes=len(blob))
    except Exception as e:  # report and go on to the profiler trace
        say(flight_recorder_error=repr(e))
    from torch.profiler import ProfilerActivity, profile
    a = torch.randn(2048, 2048, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for step in range(4):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                b = a @ a
                dist.all_reduce(b)
                dist.all_gather([torch.empty_like(b)], b)
        torch.cuda.synchronize()
    path = os.path.join(out, "kineto_rank0.json")
    prof.export_chrome_trace(path)
    say(kineto=path, bytes=os.path.getsize(path))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
