#!/usr/bin/python3
"""Blocking time of peregrine.checkpoint.save against torch.save of the same state.

For each state size (default 64 MiB and 1 GiB of float32 tensors shaped like a model's
weights plus its optimizer's momentum) it prints, as the median of a few runs:
  - torch.save to a local file (no fsync: what a training loop blocks on),
  - peregrine.checkpoint.save into a fresh store file, and reusing the free buffer the
    agent keeps (the steady state: the previous shard's pages are already allocated),
  - the ratio torch.save / peregrine save,
  - load time (peregrine.checkpoint.load and torch.load),
  - the memory overhead: shard bytes / state bytes,
  - the agent's finishing (the payload CRC-32C), which here the peregrine-finish-shard tool
    stands in for, outside the save's blocking time.

Usage: /usr/bin/python3 bench/checkpoint/checkpoint_bench.py [--build DIR] [--sizes 64M,1G]
       [--runs N] [--store DIR] [--torch-dir DIR]
The store defaults to a fresh directory under /dev/shm (the agent's default root), the
torch file to one under the system temp dir. Both are removed at the end.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text[-1:] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.4g %s" % (n / size, unit)
    return "%d B" % n


def make_state(torch, total_bytes):
    """Weights and momentum of a stack of layers (a few large matrices and small biases)."""
    layers = 16
    per_layer = total_bytes // 2 // layers // 4  # float32 elements per layer, split weight/momentum
    cols = 1024
    rows = max(1, (per_layer - cols) // cols)
    torch.manual_seed(0)
    model = {"layer%d.weight" % i: torch.randn(rows, cols) for i in range(layers)}
    model.update({"layer%d.bias" % i: torch.randn(cols) for i in range(layers)})
    momentum = {i: {"momentum_buffer": torch.randn_like(t)} for i, t in enumerate(model.values())}
    return {"model": model, "opt": {"state": momentum, "param_groups": [{"lr": 0.1, "momentum": 0.9}]},
            "rng": torch.get_rng_state(), "step": 100}


def state_bytes(torch, state):
    total = 0
    stack = [state]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            total += obj.numel() * obj.element_size()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return total


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"), help="the build tree (lib/, python/, bin/)")
    parser.add_argument("--sizes", default="64M,1G")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--store", default="", help="parent of the store directory (default /dev/shm)")
    parser.add_argument("--torch-dir", default="", help="parent of the torch.save file (default the temp dir)")
    args = parser.parse_args()

    os.environ.setdefault("PEREGRINE_CLIENT_LIB", os.path.join(args.build, "lib", "libperegrine_client.so"))
    sys.path.insert(0, os.path.join(args.build, "python"))
    finish = os.path.join(args.build, "bin", "peregrine-finish-shard")
    for path in (os.environ["PEREGRINE_CLIENT_LIB"], finish):
        if not os.path.exists(path):
            sys.exit("checkpoint_bench: %s is missing: build peregrine_client and peregrine-finish-shard" % path)
    import torch
    from peregrine import checkpoint

    store = tempfile.mkdtemp(prefix="peregrine-bench-", dir=args.store or ("/dev/shm" if os.path.isdir("/dev/shm")
                                                                            else None))
    torch_dir = tempfile.mkdtemp(prefix="peregrine-bench-torch-", dir=args.torch_dir or None)
    os.environ.update({"PEREGRINE_CHECKPOINT_DIR": store, "RANK": "0", "WORLD_SIZE": "1"})
    os.environ.pop("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES", None)
    shard = lambda step: os.path.join(store, "step-%020d.shard" % step)
    print("checkpoint_bench: store %s, torch.save file under %s, %d runs each (median), %d CPUs, torch %s" %
          (store, torch_dir, args.runs, os.cpu_count(), torch.__version__))
    print("  the agent's finishing (CRC-32C of the payload) is simulated by peregrine-finish-shard, "
          "outside the save's blocking time")
    try:
        for size in [parse_size(s) for s in args.sizes.split(",")]:
            state = make_state(torch, size)
            nbytes = state_bytes(torch, state)
            torch_path = os.path.join(torch_dir, "state.pt")
            torch_save, torch_load = [], []
            for _ in range(args.runs):
                if os.path.exists(torch_path):
                    os.unlink(torch_path)
                torch_save.append(timed(lambda: torch.save(state, torch_path)))
                torch_load.append(timed(lambda: torch.load(torch_path)))
            torch_file = os.path.getsize(torch_path)
            os.unlink(torch_path)

            fresh, reuse, finish_times, load_times = [], [], [], []
            step = 0
            for _ in range(args.runs):
                step += 1
                fresh.append(timed(lambda: checkpoint.save(step, state)))
                shard_file = os.path.getsize(shard(step))
                # The agent prunes the shard into its free buffer; the next save claims it.
                os.rename(shard(step), os.path.join(store, "free-0.buf"))
                step += 1
                reuse.append(timed(lambda: checkpoint.save(step, state)))
                if os.path.exists(os.path.join(store, "free-0.buf")):
                    sys.exit("checkpoint_bench: the save did not claim the free buffer")
                finish_times.append(timed(lambda: subprocess.run([finish, shard(step)], check=True)))
                loaded = {}
                load_times.append(timed(lambda: loaded.update(state=checkpoint.load(step)[1])))
                got = loaded["state"]["model"]["layer0.weight"]
                if not torch.equal(got, state["model"]["layer0.weight"]):
                    sys.exit("checkpoint_bench: the loaded state differs from the saved one")
                del loaded
                os.unlink(shard(step))
            med = statistics.median
            print("state %s (%d tensors):" % (human(nbytes), 2 * len(state["model"]) + 1))
            print("  torch.save (local file)        %9.1f ms   file %s" % (1e3 * med(torch_save), human(torch_file)))
            print("  peregrine save, fresh file     %9.1f ms   ratio torch.save / save = %.1fx" %
                  (1e3 * med(fresh), med(torch_save) / med(fresh)))
            print("  peregrine save, reused buffer  %9.1f ms   ratio torch.save / save = %.1fx (budget: >= 20x)" %
                  (1e3 * med(reuse), med(torch_save) / med(reuse)))
            print("  agent finish (simulated, CRC)  %9.1f ms   (tool start-up included)" % (1e3 * med(finish_times)))
            print("  load: peregrine %.1f ms, torch.load %.1f ms" % (1e3 * med(load_times), 1e3 * med(torch_load)))
            print("  memory overhead: shard %s / state %s = %.4f" %
                  (human(shard_file), human(nbytes), shard_file / nbytes))
            del state
    finally:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(torch_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
