#!/usr/bin/env python3
"""Writes the NCCL fixtures of tests/cli/analyze (deterministic: fixed seeds). Run from this
directory: python3 make_fixtures.py. See README.md for the format sources."""
import json
import random

# One training iteration's NCCL calls: (op, comm, count, datatype), datatype = ncclDataType_t
# (7 float32, 9 bfloat16). A Megatron-like step: TP all-gathers / reduce-scatters, a DP
# gradient reduce-scatter, a parameter all-gather, and the loss all-reduce.
PATTERN = [
    ("AllGather", "tp", 4194304, 9),
    ("ReduceScatter", "tp", 4194304, 9),
    ("AllGather", "tp", 4194304, 9),
    ("ReduceScatter", "tp", 4194304, 9),
    ("ReduceScatter", "dp", 25165824, 9),
    ("AllGather", "dp", 25165824, 9),
    ("AllReduce", "dp", 1, 7),
]
COMMS = {0: {"tp": 0x55D0C1A2B300, "dp": 0x55D0C1F04A10},
         1: {"tp": 0x5611E3B0C2F0, "dp": 0x5611E3F7D880}}
HOSTS = {0: ("node-a", 48213), 1: ("node-b", 51877)}


def iteration_ms(rng, it, slow_from):
    base = 250.0 * (1.3 if slow_from is not None and it >= slow_from else 1.0)
    return base * (1 + rng.gauss(0, 0.01))


def calls_of(rank, iterations, slow_from, seed):
    """[(time_ns, op, comm, count, dtype)] for one rank, with a warm-up broadcast burst."""
    rng = random.Random(seed)
    t = 1_741_944_413_000_000_000 + rank * 137_000  # 2025-03-14 09:26:53 UTC
    out = []
    for i in range(3):  # parameter broadcast at start-up (not part of the iteration)
        out.append((t, "Broadcast", COMMS[rank]["dp"], 16777216, 9))
        t += 4_000_000
    for it in range(iterations):
        dur = iteration_ms(rng, it, slow_from) * 1e6
        offsets = [0.02, 0.10, 0.30, 0.38, 0.80, 0.86, 0.97]
        for (op, comm, count, dtype), off in zip(PATTERN, offsets):
            out.append((t + int(dur * off), op, COMMS[rank][comm], count, dtype))
        t += int(dur)
    return out


def stamp(ns):
    import datetime
    secs, frac = divmod(ns, 1_000_000_000)
    d = datetime.datetime.fromtimestamp(secs, tz=datetime.timezone.utc)
    return d.strftime("[%Y-%m-%d %H:%M:%S") + ".%06d] " % (frac // 1000)


def nccl_line(rank, opcount, op, comm, count, dtype, ns, with_time):
    host, pid = HOSTS[rank]
    buf = 0x7F2A4C000000 + (opcount % 4) * 0x2000000 + rank * 0x100000000
    prefix = stamp(ns) if with_time else ""
    return (f"{prefix}{host}:{pid}:{pid} [{rank}] NCCL INFO {op}: opCount {opcount:x} "
            f"sendbuff 0x{buf:x} recvbuff 0x{buf + 0x1000000:x} count {count} datatype {dtype} "
            f"op 0 root 0 comm 0x{comm:x} [nranks=2] stream 0x{0x55D0C19F0A40 + rank * 0x1000:x}")


def init_lines(rank, ns, with_time):
    host, pid = HOSTS[rank]
    p = (stamp(ns) if with_time else "") + f"{host}:{pid}:{pid} [{rank}] NCCL INFO "
    return [
        p + "Bootstrap : Using eth0:10.0.0.%d<0>" % (11 + rank),
        p + "NCCL version 2.26.2+cuda12.8",
        p + f"cudaDriverVersion 12080",
        p + f"ncclCommInitRank comm 0x{COMMS[rank]['dp']:x} rank {rank} nranks 2 cudaDev {rank} nvmlDev {rank} "
            f"busId {0x18000 + rank * 0x1000:x} commId 0x7d3f1a2b9c4e5f60 - Init COMPLETE",
        p + f"ncclCommInitRank comm 0x{COMMS[rank]['tp']:x} rank 0 nranks 1 cudaDev {rank} nvmlDev {rank} "
            f"busId {0x18000 + rank * 0x1000:x} commId 0x1b2c3d4e5f607182 - Init COMPLETE",
    ]


def write_nccl_log(path, iterations, slow_from, with_time, ranks):
    events = []
    for rank in ranks:
        first = calls_of(rank, iterations, slow_from, seed=100 + rank)
        for line in init_lines(rank, first[0][0] - 2_000_000_000, with_time):
            events.append((first[0][0] - 2_000_000_000, line))
        for n, (ns, op, comm, count, dtype) in enumerate(first):
            events.append((ns, nccl_line(rank, n, op, comm, count, dtype, ns, with_time)))
            if n % 70 == 69:
                events.append((ns + 1, f"[rank{rank}]: iteration {n // 7} | loss 2.{n % 97:02d}"))
    events.sort(key=lambda e: e[0])
    with open(path, "w") as f:
        for _, line in events:
            f.write(line + "\n")


def write_jsonl(path, iterations, slow_from):
    with open(path, "w") as f:
        for rank in (0, 1):
            for ns, op, comm, count, dtype in calls_of(rank, iterations, slow_from, seed=200 + rank):
                f.write(json.dumps({"op": op, "comm": "0x%x" % comm, "count": count,
                                    "datatype": dtype, "time_ns": ns, "rank": rank},
                                   separators=(",", ":")) + "\n")


def write_kineto(path, steps, with_profiler_steps, slow_from):
    rng = random.Random(300)
    ev = []
    pid, tid = 48213, 48213
    t = 1741944413000000.0  # us
    ext = 1000
    for step in range(steps):
        dur_ms = iteration_ms(rng, step, slow_from)
        dur = dur_ms * 1000.0
        if with_profiler_steps:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 2}",
                       "pid": pid, "tid": tid, "ts": round(t, 3), "dur": round(dur, 3),
                       "args": {"External id": ext, "Record function id": 0, "Ev Idx": ext}})
            ext += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": pid, "tid": tid,
                   "ts": round(t + 0.01 * dur, 3), "dur": round(0.2 * dur, 3),
                   "args": {"External id": ext, "Sequence number": step, "Fwd thread id": 0}})
        ext += 1
        for k, (op, comm, count, dtype) in enumerate(PATTERN):
            cts = t + dur * (0.05 + 0.13 * k)
            coll = {"AllGather": "_allgather_base", "ReduceScatter": "_reduce_scatter_base",
                    "AllReduce": "allreduce"}[op]
            args = {"External id": ext, "Collective name": coll,
                    "In msg nelems": count if op != "AllGather" else count // 2,
                    "Out msg nelems": count, "Group size": 2,
                    "dtype": "BFloat16" if dtype == 9 else "Float",
                    "In split size": "[]", "Out split size": "[]",
                    "Process Group Name": "1" if comm == "tp" else "0",
                    "Process Group Description": "tp_group" if comm == "tp" else "default_pg",
                    "Process Group Ranks": "[0, 1]"}
            torch_name = {"AllGather": "nccl:_all_gather_base",
                          "ReduceScatter": "nccl:_reduce_scatter_base",
                          "AllReduce": "nccl:all_reduce"}[op]
            if with_profiler_steps:
                ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid,
                           "tid": tid, "ts": round(cts, 3), "dur": 31.5, "args": dict(args)})
                ev.append({"ph": "X", "cat": "cpu_op", "name": torch_name, "pid": pid, "tid": tid,
                           "ts": round(cts + 1.2, 3), "dur": 28.1, "args": dict(args)})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                       "tid": tid, "ts": round(cts + 5.0, 3), "dur": 6.4,
                       "args": {"External id": ext, "cbid": 211, "correlation": ext}})
            kname = {"AllGather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                     "ReduceScatter": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                     "AllReduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"}[op]
            kargs = {"External id": ext, "queued": 0, "device": 0, "context": 1,
                     "stream": 63 if comm == "tp" else 59, "correlation": ext,
                     "registers per thread": 96, "shared memory": 0, "blocks per SM": 0.25,
                     "grid": [2, 1, 1], "block": [640, 1, 1]}
            kargs.update({k2: v for k2, v in args.items() if k2 != "External id"})
            ev.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": kargs["stream"],
                       "ts": round(cts + 40.0, 3), "dur": round(dur * 0.04, 3), "args": kargs})
            ext += 1
        t += dur
    doc = {"schemaVersion": 1,
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045870592,
                                 "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2, "pg_count": 2,
                               "pg_config": [], "nccl_version": "2.21.5"},
           "cuda_runtime_version": 12040, "cuda_driver_version": 12080,
           "trace_id": "2F9B1C7E6A4D4E55", "displayTimeUnit": "ms",
           "baseTimeNanoseconds": 1741944400000000000,
           "traceEvents": ev,
           "traceName": "node-a_48213.1741944413012.pt.trace.json"}
    with open(path, "w") as f:
        f.write("{\n")
        keys = list(doc)
        for i, k in enumerate(keys):
            if k == "traceEvents":
                f.write('  "traceEvents": [\n')
                f.write(",\n".join("  " + json.dumps(e) for e in ev))
                f.write("\n  ]")
            else:
                f.write(f"  {json.dumps(k)}: {json.dumps(doc[k])}")
            f.write(",\n" if i + 1 < len(keys) else "\n")
        f.write("}\n")


if __name__ == "__main__":
    write_nccl_log("nccl_debug_timestamps.log", iterations=64, slow_from=40, with_time=True, ranks=(0, 1))
    write_nccl_log("nccl_debug_no_timestamps.log", iterations=12, slow_from=None, with_time=False, ranks=(0,))
    write_jsonl("ring_dump.jsonl", iterations=64, slow_from=40)
    write_kineto("kineto_profiler_steps.json", steps=12, with_profiler_steps=True, slow_from=None)
    write_kineto("kineto_kernels_only.json", steps=64, with_profiler_steps=False, slow_from=40)
