#!/usr/bin/python3
"""In-memory checkpoints against torch.save/torch.load, in one run.

For each state size (default 64 MiB and 1 GiB of float32 tensors shaped like a model's
weights plus its optimizer's momentum) it prints, as the median of a few runs:
  - torch.save to a local file (no fsync: what a training loop blocks on) and torch.load,
  - the blocking time of peregrine.checkpoint.save in copy mode and in snapshot mode (the
    steady state: the agent's free buffer reused), each with its ratio to torch.save
    (the budget: torch.save / save >= 20), and the snapshot child's time to publish,
  - load in place (peregrine.checkpoint.load) against torch.load,
  - the snapshot's copy-on-write cost: minor page faults and time of a training step
    that rewrites the whole state right after save returns, against the same step with
    no child in flight, and the extra memory those faults stand for,
  - memory: shard bytes / state bytes, and the store a rank needs (two versions plus one
    backup held for a peer),
  - the agent's finishing (CRC-32C of the payload, peregrine-finish-shard standing in).
Then the agent's data channel (peregrine-checkpoint-peer-bench: PutShard/GetShard on
loopback), and with --train, examples/pytorch/train.py with a ~64 MiB state checkpointed
every step (copy and snapshot mode) against never: mean step time and the overhead.

The save figures are printed twice: as the trainer starts by default, and with
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc's memory on transparent huge pages, which
makes the snapshot's fork cheaper).

Usage: /usr/bin/python3 bench/checkpoint/checkpoint_bench.py [--build DIR] [--sizes 64M,1G]
       [--runs N] [--store DIR] [--torch-dir DIR] [--no-peer] [--no-thp] [--train]
       [--train-steps N]
The store defaults to a fresh directory under /dev/shm (the agent's default root), the
torch file to one under the system temp dir. Both are removed at the end.
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def children():
    pids = []
    for tid in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/children" % tid) as f:
            pids.extend(int(p) for p in f.read().split())
    return pids


def rss_bytes(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def training_step(torch, state):
    """What an optimizer step does to the state: every tensor rewritten in place."""
    with torch.no_grad():
        for t in state["model"].values():
            t.add_(1e-3)
        for s in state["opt"]["state"].values():
            s["momentum_buffer"].mul_(0.9)


class Pruner(threading.Thread):
    """What the agent's store does to a rank directory between saves (without the CRC):
    keeps the newest two shards, recycles an older one as the free buffer, deletes the
    rest."""

    def __init__(self, directory):
        super().__init__(daemon=True)
        self.directory, self.stop = directory, threading.Event()

    def run(self):
        while not self.stop.wait(0.005):
            names = os.listdir(self.directory)
            shards = sorted(n for n in names if n.endswith(".shard"))
            has_free = any(n.startswith("free-") for n in names)
            for old in shards[:-2]:
                path = os.path.join(self.directory, old)
                try:
                    if not has_free:
                        os.rename(path, os.path.join(self.directory, "free-0.buf"))
                        has_free = True
                    else:
                        os.unlink(path)
                except FileNotFoundError:
                    pass


def train_check(args, store_parent):
    """examples/pytorch/train.py alone, ~64 MiB of parameters + momentum, checkpointed
    every step (copy, snapshot) and never: mean step time of each."""
    script = os.path.join(REPO, "examples", "pytorch", "train.py")
    hidden, layers = 1024, 9  # (32*1024 + 8*1024*1024 + 1025 + 9*1024) floats, x2 with momentum
    params = 32 * hidden + (layers - 1) * hidden * hidden + layers * hidden + hidden + 1
    print("examples/pytorch/train.py --hidden %d --layers %d --batch %d: %s of parameters + momentum, %d steps "
          "(the first %d not counted), one process" % (hidden, layers, args.train_batch, human(2 * 4 * params),
                                                      args.train_steps, args.train_warmup))
    print("  (configurations interleaved over %d rounds; CPU: train.py and its snapshot children, from "
          "getrusage, robust to other load on the host)" % args.train_rounds)
    configs = (("never", "snapshot", 0), ("every step, copy", "copy", 1), ("every step, snapshot", "snapshot", 1))
    wall = {label: [] for label, _, _ in configs}
    save = {label: [] for label, _, _ in configs}
    cpu = {label: [] for label, _, _ in configs}
    for _ in range(args.train_rounds):
        for label, mode, every in configs:
            directory = tempfile.mkdtemp(prefix="peregrine-bench-train-", dir=store_parent)
            env = dict(os.environ)
            env.update({"PEREGRINE_CHECKPOINT_DIR": directory, "RANK": "0", "WORLD_SIZE": "1",
                        "PEREGRINE_CHECKPOINT_MODE": mode, "PYTHONPATH": os.path.join(args.build, "python")})
            env.pop("PEREGRINE_CHECKPOINT_INTERVAL", None)
            pruner = Pruner(directory)
            pruner.start()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                out = subprocess.run(["/usr/bin/python3", script, "--steps", str(args.train_steps), "--hidden",
                                      str(hidden), "--layers", str(layers), "--batch", str(args.train_batch),
                                      "--checkpoint-every", str(every)],
                                     env=env, capture_output=True, text=True, check=True).stdout
            finally:
                pruner.stop.set()
                pruner.join()
                shutil.rmtree(directory, ignore_errors=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[label].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            steps = [dict(kv.split("=", 1) for kv in line.split()[1:]) for line in out.splitlines()
                     if line.startswith("[peregrine] step=")]
            counted = steps[args.train_warmup:]
            wall[label].append(statistics.mean(float(s["iter_ms"]) for s in counted))
            save[label].append(statistics.mean(float(s["checkpoint_ms"]) for s in counted))
    mean = statistics.mean
    base = mean(wall["never"])
    for label, _, _ in configs:
        extra_cpu_ms = 1e3 * (mean(cpu[label]) - mean(cpu["never"])) / args.train_steps
        line = "  %-22s mean step %8.2f ms (runs: %s)   save() %6.2f ms" % (
            label, mean(wall[label]), ", ".join("%.1f" % w for w in wall[label]), mean(save[label]))
        if label != "never":
            line += "\n  %-22s overhead: wall %+6.1f%% of the step; CPU %+.1f ms per step = %+.1f%% of the step " \
                    "(budget: < 1%%)" % ("", 100 * (mean(wall[label]) - base) / base, extra_cpu_ms,
                                        100 * extra_cpu_ms / base)
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"), help="the build tree (lib/, python/, bin/)")
    parser.add_argument("--sizes", default="64M,1G")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--store", default="", help="parent of the store directory (default /dev/shm)")
    parser.add_argument("--torch-dir", default="", help="parent of the torch.save file (default the temp dir)")
    parser.add_argument("--no-peer", action="store_true", help="skip the data channel (peer_bench)")
    parser.add_argument("--no-thp", action="store_true",
                        help="skip the second pass with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (malloc on huge pages)")
    parser.add_argument("--train", action="store_true", help="run the every-step check on examples/pytorch/train.py")
    parser.add_argument("--train-steps", type=int, default=40)
    parser.add_argument("--train-warmup", type=int, default=8)
    parser.add_argument("--train-rounds", type=int, default=2)
    parser.add_argument("--train-batch", type=int, default=32)
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

            saves = {"copy": [], "snapshot": []}
            published, finish_times, load_times = [], [], []
            cow_faults, cow_step, base_faults, base_step, rss_pair = [], [], [], [], []
            step = 0
            for _ in range(args.runs):
                for mode in ("copy", "snapshot"):
                    step += 1
                    # The agent pruned the previous shard into its free buffer: this save
                    # reuses pages that are already allocated (the steady state).
                    if os.path.exists(shard(step - 1)):
                        os.rename(shard(step - 1), os.path.join(store, "free-0.buf"))
                    expected = state["model"]["layer0.weight"].clone()  # what this save must keep
                    started = time.perf_counter()
                    if not checkpoint.save(step, state, mode=mode):
                        sys.exit("checkpoint_bench: the save of step %d was skipped" % step)
                    saves[mode].append(time.perf_counter() - started)
                    if mode == "snapshot":
                        kids = children()
                        rss_pair.append(rss_bytes(os.getpid()) + sum(rss_bytes(k) for k in kids))
                        faults = minor_faults()
                        cow_step.append(timed(lambda: training_step(torch, state)))
                        cow_faults.append(minor_faults() - faults)
                        if not checkpoint.wait():
                            sys.exit("checkpoint_bench: the snapshot of step %d failed" % step)
                        published.append(time.perf_counter() - started)
                        faults = minor_faults()
                        base_step.append(timed(lambda: training_step(torch, state)))
                        base_faults.append(minor_faults() - faults)
                    if os.path.exists(os.path.join(store, "free-0.buf")):
                        sys.exit("checkpoint_bench: the save did not claim the free buffer")
                shard_file = os.path.getsize(shard(step))
                finish_times.append(timed(lambda: subprocess.run([finish, shard(step)], check=True)))
                loaded = {}
                load_times.append(timed(lambda: loaded.update(state=checkpoint.load(step)[1])))
                if not torch.equal(loaded["state"]["model"]["layer0.weight"], expected):
                    sys.exit("checkpoint_bench: the loaded snapshot differs from the state at save time")
                del loaded, expected
            med = statistics.median
            page = os.sysconf("SC_PAGE_SIZE")
            print("state %s (%d tensors):" % (human(nbytes), 2 * len(state["model"]) + 1))
            print("  torch.save (local file)           %9.1f ms   file %s" %
                  (1e3 * med(torch_save), human(torch_file)))
            for mode in ("copy", "snapshot"):
                print("  peregrine save, %-8s blocking  %9.1f ms   torch.save / save = %6.1fx (budget: >= 20x)" %
                      (mode, 1e3 * med(saves[mode]), med(torch_save) / med(saves[mode])))
            print("  snapshot published by the child  %9.1f ms after save() was called (the trainer ran meanwhile)" %
                  (1e3 * med(published)))
            print("  load in place %.1f ms, torch.load %.1f ms: torch.load / load = %.1fx" %
                  (1e3 * med(load_times), 1e3 * med(torch_load), med(torch_load) / med(load_times)))
            print("  copy-on-write: a step rewriting the whole state right after a snapshot save: %d minor faults, "
                  "%.1f ms; with no child in flight: %d faults, %.1f ms; extra memory while the child runs <= %s "
                  "(state %s); RSS trainer + child just after save %s (shared pages counted twice)" %
                  (med(cow_faults), 1e3 * med(cow_step), med(base_faults), 1e3 * med(base_step),
                   human(max(0, med(cow_faults) - med(base_faults)) * page), human(nbytes), human(med(rss_pair))))
            print("  agent finish (simulated, CRC)     %9.1f ms   (tool start-up included; after the save)" %
                  (1e3 * med(finish_times)))
            print("  memory: shard %s / state %s = %.4f; a rank's store for two versions + one held backup = "
                  "3 shards = %s (%.2fx the state)" % (human(shard_file), human(nbytes), shard_file / nbytes,
                                                      human(3 * shard_file), 3 * shard_file / nbytes))
            for name in os.listdir(store):
                os.unlink(os.path.join(store, name))
            del state
        sys.stdout.flush()
        if not args.no_thp and "hugetlb" not in os.environ.get("GLIBC_TUNABLES", ""):
            # The same saves with the trainer's heap on transparent huge pages: fork copies
            # one page-table entry per 2 MiB instead of 512.
            print("--- again with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (set in the trainer's environment):", flush=True)
            env = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.hugetlb=1")
            subprocess.run([sys.executable, os.path.abspath(__file__), "--build", args.build, "--sizes", args.sizes,
                            "--runs", str(args.runs), "--no-peer", "--no-thp"] +
                           (["--store", args.store] if args.store else []) +
                           (["--torch-dir", args.torch_dir] if args.torch_dir else []), env=env, check=True)
        if not args.no_peer:
            peer = os.path.join(args.build, "bin", "peregrine-checkpoint-peer-bench")
            subprocess.run([peer, "--sizes", args.sizes, "--runs", str(min(args.runs, 3))], check=True)
        if args.train:
            train_check(args, os.path.dirname(store))
    finally:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(torch_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
