#!/usr/bin/python3
"""Writes PyTorch NCCL flight recorder dumps for the `peregrinectl analyze fr` tests.

Built by us: the PyTorch here (Debian's 1.13) has no flight recorder, so these dumps are
made in the layout PyTorch documents and writes (FlightRecorder::dump_dict /
getCollectiveTrace, version "2.x"): one file per rank, named <prefix><rank>, holding a
pickle of {"version", "comm_lib_version", "pg_config", "pg_status", "entries": [...]}.

Most files are written byte for byte the way libtorch's Pickler writes them (protocol 2,
BINUNICODE strings memoized with BINPUT, EMPTY_DICT/MARK/SETITEMS, EMPTY_LIST/MARK/APPENDS,
TUPLE2, 8-byte LONG1); with --type-tags also the torch.jit._pickle.restore_type_tag
wrappers older libtorch put around every dict and list. Some are written by Python's own
pickle (protocols 2, 4 and 5). Every file is checked with pickle.loads against the data.

usage: make_fr_dumps.py OUTDIR   -> OUTDIR/<case>/nccl_trace_rank_<rank>
"""
import gzip
import os
import pickle
import struct
import sys

PREFIX = "nccl_trace_rank_"


class TorchStylePickler:
    """Emits the opcodes libtorch's Pickler (torch/csrc/jit/serialization/pickler.cpp) emits."""

    def __init__(self, type_tags=False):
        self.out = bytearray()
        self.memo = 0
        self.strings = {}
        self.globals = {}
        self.type_tags = type_tags

    def put(self):
        if self.memo <= 255:
            self.out += b"q" + bytes([self.memo])
        else:
            self.out += b"r" + struct.pack("<I", self.memo)
        self.memo += 1
        return self.memo - 1

    def get(self, i):
        self.out += (b"h" + bytes([i])) if i <= 255 else (b"j" + struct.pack("<I", i))

    def glob(self, module, name):
        key = module + "\n" + name + "\n"
        if key in self.globals:
            self.get(self.globals[key])
        else:
            self.out += b"c" + key.encode()
            self.globals[key] = self.put()

    def value(self, v):
        if v is None:
            self.out += b"N"
        elif isinstance(v, bool):
            self.out += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            if 0 <= v <= 0xFF:
                self.out += b"K" + bytes([v])
            elif 0 <= v <= 0xFFFF:
                self.out += b"M" + struct.pack("<H", v)
            elif -(2**31) <= v < 2**31:
                self.out += b"J" + struct.pack("<i", v)
            else:
                self.out += b"\x8a\x08" + struct.pack("<q", v)
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            if v in self.strings:
                self.get(self.strings[v])
            else:
                b = v.encode()
                self.out += b"X" + struct.pack("<I", len(b)) + b
                self.strings[v] = self.put()
        elif isinstance(v, tuple):
            for x in v:
                self.value(x)
            self.out += {0: b")", 1: b"\x85", 2: b"\x86", 3: b"\x87"}[len(v)]
        elif isinstance(v, list):
            self.tagged(v, b"]", b"e", lambda: [self.value(x) for x in v], "List[Any]")
        elif isinstance(v, dict):
            def items():
                for k, x in v.items():
                    self.value(k)
                    self.value(x)
            self.tagged(v, b"}", b"u", items, "Dict[Any, Any]")
        else:
            raise TypeError(type(v))

    def tagged(self, v, empty, fill, push_items, type_str):
        if self.type_tags:
            self.glob("torch.jit._pickle", "restore_type_tag")
        self.out += empty + b"("
        push_items()
        self.out += fill
        if self.type_tags:
            self.value(type_str)
            self.out += b"\x86R"
        # (libtorch memoizes a list or dict only when it is shared; these are not)

    def dumps(self, v):
        self.out += b"\x80\x02"
        self.value(v)
        self.out += b"."
        return bytes(self.out)


def entry(record_id, pg, seq, op, state, sizes=((1024,),), dtype="Float", out_sizes=None, p2p_seq=0,
          is_p2p=False, t=1_700_000_000_000_000_000):
    name, desc = pg
    out_sizes = sizes if out_sizes is None else out_sizes
    started = state in ("started", "completed")
    completed = state == "completed"
    return {
        "frames": [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2501},
                   {"name": "train_step", "filename": "/workspace/train.py", "line": 88}],
        "record_id": record_id,
        "pg_id": int(name) if name.isdigit() else 9,
        "process_group": (name, desc),
        "thread_name": "pt_main_thread",
        "thread_id": "140245",
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": record_id + 1,
        "profiling_name": "nccl:" + op,
        "time_created_ns": t + record_id * 1000,
        "duration_ms": 1.25 if completed else None,
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": [dtype] * len(sizes),
        "output_sizes": [list(s) for s in out_sizes],
        "output_dtypes": [dtype] * len(out_sizes),
        "state": state,
        "time_discovered_started_ns": t + record_id * 1000 + 10 if started else None,
        "time_discovered_completed_ns": t + record_id * 1000 + 20 if completed else None,
        "retired": completed,
        "timeout_ms": 600000,
        "is_p2p": is_p2p,
    }


def dump(entries, groups, version="2.10"):
    for e in entries:  # PyTorch omits duration_ms when there is none
        if e.get("duration_ms", 0) is None:
            del e["duration_ms"]
    status = {}
    for e in entries:
        s = status.setdefault(str(e["pg_id"]), {"last_enqueued_collective": -1, "last_started_collective": -1,
                                                "last_completed_collective": -1})
        if not e["is_p2p"]:
            s["last_enqueued_collective"] = max(s["last_enqueued_collective"], e["collective_seq_id"])
            if e["state"] != "scheduled":
                s["last_started_collective"] = max(s["last_started_collective"], e["collective_seq_id"])
            if e["state"] == "completed":
                s["last_completed_collective"] = max(s["last_completed_collective"], e["collective_seq_id"])
    return {
        "version": version,
        "pg_config": {name: {"name": name, "desc": desc, "ranks": "[" + ", ".join(map(str, ranks)) + "]"}
                      for (name, desc), ranks in groups.items()},
        "comm_lib_version": "2.21.5",
        "pg_status": status,
        "entries": entries,
    }


DEFAULT = ("0", "default_pg")
WORLD4 = {DEFAULT: [0, 1, 2, 3]}


def allreduce_history(pg, upto, state_last="completed", op_at=None, start_record=0):
    """Collectives 1..upto on `pg`, all completed except the last (state_last)."""
    out = []
    for seq in range(1, upto + 1):
        op = (op_at or {}).get(seq, "all_reduce")
        out.append(entry(start_record + seq - 1, pg, seq, op, "completed" if seq < upto else state_last))
    return out


def case_missing_rank():
    # Ranks 0, 1, 3 entered all_reduce #5 (started); rank 2 finished #4 and never came.
    return {r: dump(allreduce_history(DEFAULT, 4 if r == 2 else 5, "completed" if r == 2 else "started"), WORLD4)
            for r in range(4)}


def case_mismatch():
    # Collective #5: rank 2 calls all_gather, the others all_reduce (a desync).
    dumps = {}
    for r in range(4):
        e = allreduce_history(DEFAULT, 5, "started")
        if r == 2:
            e[-1] = entry(4, DEFAULT, 5, "all_gather", "started", sizes=((1024,),), out_sizes=((4096,),))
        dumps[r] = dump(e, WORLD4)
    return dumps


def case_all_stuck():
    # Every rank entered all_reduce #5 and none completed it: nobody is missing.
    return {r: dump(allreduce_history(DEFAULT, 5, "started"), WORLD4) for r in range(4)}


def case_healthy():
    return {r: dump(allreduce_history(DEFAULT, 6), WORLD4) for r in range(4)}


def case_multi_pg():
    # Default group of 4 ranks healthy; TP groups "1" = [0, 1] and "2" = [2, 3]. In group 2,
    # rank 2 waits in reduce_scatter #3 while rank 3 is stuck in the default group's #4.
    tp1, tp2 = ("1", "tp"), ("2", "tp")
    groups = {DEFAULT: [0, 1, 2, 3], tp1: [0, 1], tp2: [2, 3]}
    dumps = {}
    for r in range(4):
        e = allreduce_history(DEFAULT, 3)
        tp = tp1 if r < 2 else tp2
        rec = len(e)
        for seq in (1, 2):
            e.append(entry(rec, tp, seq, "_reduce_scatter_base", "completed", sizes=((4096,),), out_sizes=((2048,),)))
            rec += 1
        if r == 2:
            e.append(entry(rec, tp, 3, "_reduce_scatter_base", "started", sizes=((4096,),), out_sizes=((2048,),)))
        if r == 3:
            e.append(entry(rec, DEFAULT, 4, "all_reduce", "started"))
        if r < 2:
            e.append(entry(rec, tp, 3, "_reduce_scatter_base", "completed", sizes=((4096,),), out_sizes=((2048,),)))
        dumps[r] = dump(e, groups)
    return dumps


def case_p2p():
    # Pipeline stages 0 -> 1: rank 0's send to 1 is pending and rank 1 never posted the recv.
    world2 = {DEFAULT: [0, 1]}
    base = [entry(0, DEFAULT, 1, "all_reduce", "completed")]
    r0 = base + [entry(1, DEFAULT, 1, "send 0->1", "completed", p2p_seq=1, is_p2p=True),
                 entry(2, DEFAULT, 1, "send 0->1", "started", p2p_seq=2, is_p2p=True)]
    r1 = base + [entry(1, DEFAULT, 1, "recv 1<-0", "completed", p2p_seq=1, is_p2p=True)]
    return {0: dump(r0, world2), 1: dump(r1, world2)}


def case_garbage():
    # Ranks 0 and 1 readable (rank 1 with one entry lacking collective_seq_id), the rest not.
    good = case_missing_rank()
    bad = dump(allreduce_history(DEFAULT, 5, "started"), WORLD4)
    del bad["entries"][1]["collective_seq_id"]
    return {0: good[0], 1: bad, 3: dump(allreduce_history(DEFAULT, 5, "started"), WORLD4, "1.0")}


def write(path, data, style):
    if style == "torch":
        blob = TorchStylePickler().dumps(data)
    elif style == "torch-tags":
        blob = TorchStylePickler(type_tags=True).dumps(data)
    else:
        blob = pickle.dumps(data, protocol=int(style[-1]))
    if style != "torch-tags" or _have_torch():
        assert pickle.loads(blob) == data, path  # the bytes are a pickle of exactly this data
    with open(path, "wb") as f:
        f.write(blob)
    return blob


def _have_torch():
    try:
        import torch.jit._pickle  # noqa: F401  (restore_type_tag lives there)
        return True
    except ImportError:
        return False


def main(out):
    cases = {
        "missing_rank": (case_missing_rank(), "torch"),
        "missing_rank_tags": (case_missing_rank(), "torch-tags"),
        "mismatch": (case_mismatch(), "torch"),
        "all_stuck": (case_all_stuck(), "torch"),
        "healthy": (case_healthy(), "torch"),
        "healthy_py2": (case_healthy(), "protocol2"),
        "healthy_py4": (case_healthy(), "protocol4"),
        "healthy_py5": (case_healthy(), "protocol5"),
        "multi_pg": (case_multi_pg(), "torch"),
        "p2p": (case_p2p(), "torch"),
        "garbage": (case_garbage(), "torch"),
    }
    for name, (dumps, style) in cases.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        for rank, data in dumps.items():
            write(os.path.join(d, PREFIX + str(rank)), data, style)
    g = os.path.join(out, "garbage")
    # Rank 2: the first 300 bytes of a real dump (truncated mid-pickle).
    blob = TorchStylePickler().dumps(case_missing_rank()[2])
    with open(os.path.join(g, PREFIX + "2"), "wb") as f:
        f.write(blob[:300])
    # Rank 4: not a pickle; rank 5: a pickle of code, not data; and a file with no rank.
    with open(os.path.join(g, PREFIX + "4"), "w") as f:
        f.write("NCCL INFO AllReduce: opCount 5 ...\n")
    with open(os.path.join(g, PREFIX + "5"), "wb") as f:
        f.write(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.")
    with open(os.path.join(g, "README"), "w") as f:
        f.write("not a dump\n")
    # A gzip-compressed copy of the missing-rank case (users compress dumps they move).
    z = os.path.join(out, "missing_rank_gz")
    os.makedirs(z, exist_ok=True)
    for rank, data in case_missing_rank().items():
        with gzip.open(os.path.join(z, PREFIX + str(rank) + ".gz"), "wb") as f:
            f.write(TorchStylePickler().dumps(data))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
