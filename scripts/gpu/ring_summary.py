"""Summarises a libperegrine_nccl.so ring file for the GPU check (gpu-check.sh).

Usage: python3 ring_summary.py RING

Reads the header fields the check needs (real library path, NCCL version, profiling and
CUDA-event state, drops) and the records: calls per operation, host-exit durations and
CUDA-event (device) durations of the all-reduce calls, split by element count. The
layout is agent/nccl_ring/ring_format.h's (version 1); the agent's C++ reader
(agent/nccl_ring/ring_reader.h) is the reference, this is a read-only summary for a
machine where only Python and the hook are present. Prints one JSON line.
"""
import json
import statistics
import struct
import sys

MAGIC = 0x474E495252474550
HEADER_SIZE, COMM_CAPACITY, COMM_SLOT, SLOT = 4096, 256, 128, 64
RECORDS_OFFSET = HEADER_SIZE + COMM_CAPACITY * COMM_SLOT
OPS = {1: "GetUniqueId", 2: "CommInitRank", 3: "CommInitRankConfig", 4: "CommInitAll", 5: "CommSplit",
       6: "CommDestroy", 7: "CommAbort", 8: "AllReduce", 9: "Broadcast", 10: "Reduce", 11: "AllGather",
       12: "ReduceScatter", 13: "Send", 14: "Recv", 15: "GroupStart", 16: "GroupEnd", 17: "AlltoAll",
       18: "Gather", 19: "Scatter", 20: "Bcast", 21: "CommInitRankScalable", 22: "CommShrink",
       23: "CommFinalize", 24: "CommRevoke", 25: "GroupSimulateEnd", 100: "HostExit", 101: "DeviceTime"}
CUDA_STATES = {0: "not tried", 1: "loading", 2: "CUDA events", 3: "host timing only"}


def main():
    data = open(sys.argv[1], "rb").read()
    magic, version, header_size, capacity, record_size = struct.unpack_from("<QIIII", data, 0)
    if magic != MAGIC or version != 1 or record_size != SLOT:
        sys.exit(f"{sys.argv[1]}: not a version-1 ring (magic {magic:#x}, version {version})")
    pid, global_rank, local_rank, nccl_version = struct.unpack_from("<iiii", data, 32)
    lib_path = data[56:56 + 192].split(b"\0", 1)[0].decode(errors="replace")
    write_index, _, _, dropped, skipped = struct.unpack_from("<QIIQQ", data, 256)
    profiling, trap, _, cuda_state = struct.unpack_from("<IIQI", data, 320)
    calls, count_of = {}, {}
    host_ns, device_ns = {}, {}
    for i in range(min(write_index, capacity)):
        off = RECORDS_OFFSET + i * SLOT
        seq = struct.unpack_from("<Q", data, off)[0]
        if seq == 0 or seq & 1:
            continue
        t, comm, count, link, value = struct.unpack_from("<QQQQQ", data, off + 8)
        op = data[off + 8 + 52]
        name = OPS.get(op, str(op))
        calls[name] = calls.get(name, 0) + 1
        if op == 8:
            count_of[(seq >> 1) - 1] = count
        elif op in (100, 101) and link in count_of:
            (host_ns if op == 100 else device_ns).setdefault(count_of[link], []).append(value)

    def summary(d):
        return {str(k): {"n": len(v), "median_us": statistics.median(v) / 1e3} for k, v in sorted(d.items())}

    print(json.dumps({
        "ring": sys.argv[1], "pid": pid, "rank": global_rank, "local_rank": local_rank,
        "nccl_version_code": nccl_version, "real_library": lib_path, "records": write_index,
        "dropped_records": dropped, "profiling_skipped": skipped, "profiling": profiling, "trap": trap,
        "cuda_state": CUDA_STATES.get(cuda_state, str(cuda_state)), "calls": calls,
        "allreduce_host_exit_by_count": summary(host_ns), "allreduce_device_time_by_count": summary(device_ns),
    }))


if __name__ == "__main__":
    main()
