// sim_nccl_worker: one rank of a multi-process test of the stand-in NCCL.
//
// Environment: RANK, WORLD_SIZE, PEREGRINE_TEST_NCCL_ID (the ncclUniqueId as 256 hex
// digits, made by the test process), PEREGRINE_MACHINE_ID / LOCAL_RANK / PEREGRINE_SIM_FAULTS
// (read by the library).
//
// argv[1] == "collectives": checks every op and dtype on the world communicator and on
//   split communicators (two used concurrently from two threads) against a CPU reference;
//   exits 0 when everything matched, 1 otherwise (mismatches on stderr).
// argv[1] == "serve": reads commands from stdin, one per line, answers one stdout line each:
//   allreduce             -> "allreduce exact" | "allreduce nan" | "allreduce off <relerr>" |
//                            "allreduce error <ncclResult_t>"
//   pingpong A B K        -> ranks A and B exchange K round trips of 64 bytes; A answers
//                            "pingpong <elapsed_ns>", the others "pingpong skip"
//   bulk A B BYTES        -> A sends BYTES to B; A answers "bulk <elapsed_ns>", B checks the
//                            data ("bulk ok" / "bulk bad"), others "bulk skip"
//   die                   -> _exit(9) without cleanup (a crashed peer)
//   exit                  -> destroys the communicator and exits 0
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "sim/nccl/reduce.h"

namespace {

using peregrine::simnccl::Bfloat16ToFloat;
using peregrine::simnccl::FloatToBfloat16;
using peregrine::simnccl::FloatToHalf;
using peregrine::simnccl::HalfToFloat;

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoi(v);
}

bool DecodeId(const char* hex, ncclUniqueId* id) {
  if (hex == nullptr || std::strlen(hex) != 2 * NCCL_UNIQUE_ID_BYTES) return false;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

size_t Size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

bool IsSigned(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64 || t == ncclFloat16 ||
         t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}
bool IsFloat(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16;
}

void Store(ncclDataType_t t, void* base, size_t i, double v) {
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(base)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: static_cast<uint64_t*>(base)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: static_cast<uint16_t*>(base)[i] = FloatToHalf(static_cast<float>(v)); break;
    case ncclFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(base)[i] = v; break;
    case ncclBfloat16: static_cast<uint16_t*>(base)[i] = FloatToBfloat16(static_cast<float>(v)); break;
    default: break;
  }
}

double Load(ncclDataType_t t, const void* base, size_t i) {
  switch (t) {
    case ncclInt8: return static_cast<const int8_t*>(base)[i];
    case ncclUint8: return static_cast<const uint8_t*>(base)[i];
    case ncclInt32: return static_cast<const int32_t*>(base)[i];
    case ncclUint32: return static_cast<const uint32_t*>(base)[i];
    case ncclInt64: return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case ncclUint64: return static_cast<double>(static_cast<const uint64_t*>(base)[i]);
    case ncclFloat16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case ncclFloat32: return static_cast<const float*>(base)[i];
    case ncclFloat64: return static_cast<const double*>(base)[i];
    case ncclBfloat16: return Bfloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    default: return 0;
  }
}

// Small integer inputs whose sums, products and quarter-averages are exact in every type.
double Input(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i, int salt) {
  const long h = static_cast<long>((rank * 7919 + i * 104729 + salt * 31 + 17) % 1000003);
  const bool s = IsSigned(t);
  switch (op) {
    case ncclProd: return s ? static_cast<double>(h % 5) - 2 : static_cast<double>(h % 4);
    case ncclMax:
    case ncclMin: return s ? static_cast<double>(h % 61) - 30 : static_cast<double>(h % 61);
    default: return s ? static_cast<double>(h % 15) - 7 : static_cast<double>(h % 15);
  }
}

double Combine(ncclRedOp_t op, double a, double b) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return a + b;
  }
}

double Finish(ncclDataType_t t, ncclRedOp_t op, double v, int n) {
  if (op != ncclAvg) return v;
  return IsFloat(t) ? v / n : std::trunc(v / n);
}

const char* TypeName(ncclDataType_t t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                "float16", "float32", "float64", "bfloat16"};
  return names[t];
}
const char* OpName(ncclRedOp_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return names[op];
}

struct Checker {
  std::string where;
  int failures = 0;
  void Nccl(ncclResult_t r, const std::string& what) {
    if (r != ncclSuccess) {
      std::fprintf(stderr, "%s: %s returned %s\n", where.c_str(), what.c_str(), ncclGetErrorString(r));
      ++failures;
    }
  }
  void Expect(const std::string& what, ncclDataType_t t, const void* got, size_t i, double want) {
    const double g = Load(t, got, i);
    char rounded[8];
    Store(t, rounded, 0, want);  // the reference rounded to the element type
    want = Load(t, rounded, 0);
    if (g != want) {
      if (failures < 20) {
        std::fprintf(stderr, "%s: %s element %zu: got %.17g want %.17g\n", where.c_str(),
                     what.c_str(), i, g, want);
      }
      ++failures;
    }
  }
};

const ncclDataType_t kTypes[] = {ncclInt8,   ncclUint8,   ncclInt32,   ncclUint32, ncclInt64,
                                 ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16};
const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

// Every op and dtype on one communicator. `salt` varies data between communicators.
void CheckAllOps(ncclComm_t comm, int salt, Checker& c) {
  int n = 0, r = 0;
  c.Nccl(ncclCommCount(comm, &n), "ncclCommCount");
  c.Nccl(ncclCommUserRank(comm, &r), "ncclCommUserRank");
  for (ncclDataType_t t : kTypes) {
    const size_t es = Size(t);
    for (ncclRedOp_t op : kOps) {
      for (size_t count : {size_t{1}, size_t{7}, size_t{1031}}) {
        for (bool in_place : {false, true}) {
          std::vector<char> send(count * es), recv(count * es);
          for (size_t i = 0; i < count; ++i) Store(t, send.data(), i, Input(t, op, r, i, salt));
          void* out = in_place ? send.data() : recv.data();
          const std::string what = std::string("AllReduce ") + OpName(op) + " " + TypeName(t) +
                                   " count " + std::to_string(count) + (in_place ? " in-place" : "");
          c.Nccl(ncclAllReduce(send.data(), out, count, t, op, comm, nullptr), what);
          for (size_t i = 0; i < count; ++i) {
            double want = Input(t, op, 0, i, salt);
            for (int k = 1; k < n; ++k) want = Combine(op, want, Input(t, op, k, i, salt));
            c.Expect(what, t, out, i, Finish(t, op, want, n));
          }
        }
      }
      // ReduceScatter and Reduce with this op.
      for (size_t rc : {size_t{1}, size_t{129}}) {
        std::vector<char> send(rc * n * es), recv(rc * es);
        for (size_t i = 0; i < rc * n; ++i) Store(t, send.data(), i, Input(t, op, r, i, salt + 1));
        const std::string what = std::string("ReduceScatter ") + OpName(op) + " " + TypeName(t) +
                                 " recvcount " + std::to_string(rc);
        c.Nccl(ncclReduceScatter(send.data(), recv.data(), rc, t, op, comm, nullptr), what);
        for (size_t i = 0; i < rc; ++i) {
          const size_t gi = static_cast<size_t>(r) * rc + i;
          double want = Input(t, op, 0, gi, salt + 1);
          for (int k = 1; k < n; ++k) want = Combine(op, want, Input(t, op, k, gi, salt + 1));
          c.Expect(what, t, recv.data(), i, Finish(t, op, want, n));
        }
      }
      {
        const size_t count = 300;
        const int root = 1 % n;
        std::vector<char> send(count * es), recv(count * es);
        for (size_t i = 0; i < count; ++i) Store(t, send.data(), i, Input(t, op, r, i, salt + 2));
        const std::string what = std::string("Reduce ") + OpName(op) + " " + TypeName(t);
        c.Nccl(ncclReduce(send.data(), recv.data(), count, t, op, root, comm, nullptr), what);
        if (r == root) {
          for (size_t i = 0; i < count; ++i) {
            double want = Input(t, op, 0, i, salt + 2);
            for (int k = 1; k < n; ++k) want = Combine(op, want, Input(t, op, k, i, salt + 2));
            c.Expect(what, t, recv.data(), i, Finish(t, op, want, n));
          }
        }
      }
    }
    // AllGather (out of place and in place).
    for (bool in_place : {false, true}) {
      const size_t sc = 33;
      std::vector<char> recv(sc * n * es), send(sc * es);
      char* mine = in_place ? recv.data() + static_cast<size_t>(r) * sc * es : send.data();
      for (size_t i = 0; i < sc; ++i) Store(t, mine, i, Input(t, ncclMax, r, i, salt + 3));
      const std::string what = std::string("AllGather ") + TypeName(t) + (in_place ? " in-place" : "");
      c.Nccl(ncclAllGather(mine, recv.data(), sc, t, comm, nullptr), what);
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < sc; ++i) {
          c.Expect(what, t, recv.data(), k * sc + i, Input(t, ncclMax, k, i, salt + 3));
        }
      }
    }
    // Broadcast from the last rank.
    {
      const size_t count = 517;
      const int root = n - 1;
      std::vector<char> send(count * es), recv(count * es);
      for (size_t i = 0; i < count; ++i) Store(t, send.data(), i, Input(t, ncclMax, r, i, salt + 4));
      const std::string what = std::string("Broadcast ") + TypeName(t);
      c.Nccl(ncclBroadcast(send.data(), recv.data(), count, t, root, comm, nullptr), what);
      for (size_t i = 0; i < count; ++i) c.Expect(what, t, recv.data(), i, Input(t, ncclMax, root, i, salt + 4));
    }
    // Grouped ring exchange: send to next, receive from previous, plus a self exchange.
    {
      const size_t count = (t == ncclFloat32) ? (4u << 20) / 4 : 1000;  // 4 MiB: beyond socket buffers
      std::vector<char> send(count * es), recv(count * es), self_recv(count * es);
      for (size_t i = 0; i < count; ++i) Store(t, send.data(), i, Input(t, ncclMax, r, i, salt + 5));
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      const std::string what = std::string("grouped Send/Recv ") + TypeName(t);
      c.Nccl(ncclGroupStart(), what);
      c.Nccl(ncclSend(send.data(), count, t, next, comm, nullptr), what);
      c.Nccl(ncclRecv(recv.data(), count, t, prev, comm, nullptr), what);
      c.Nccl(ncclSend(send.data(), count, t, r, comm, nullptr), what);
      c.Nccl(ncclRecv(self_recv.data(), count, t, r, comm, nullptr), what);
      c.Nccl(ncclGroupEnd(), what);
      for (size_t i = 0; i < count; ++i) {
        c.Expect(what, t, recv.data(), i, Input(t, ncclMax, prev, i, salt + 5));
        c.Expect(what + " self", t, self_recv.data(), i, Input(t, ncclMax, r, i, salt + 5));
      }
    }
  }
}

int RunCollectives(int rank, int world, const ncclUniqueId& id) {
  Checker c{"rank " + std::to_string(rank)};
  ncclComm_t comm = nullptr;
  c.Nccl(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");
  if (c.failures) return 1;
  // Split A: parity, keys reversed (rank order inside is descending).
  ncclComm_t a = nullptr, b = nullptr, none = nullptr;
  c.Nccl(ncclCommSplit(comm, rank % 2, -rank, &a, nullptr), "ncclCommSplit A");
  // Split B: halves; rank 0 opts out of a third split.
  c.Nccl(ncclCommSplit(comm, rank / 2, rank, &b, nullptr), "ncclCommSplit B");
  c.Nccl(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 0, 0, &none, nullptr),
         "ncclCommSplit NOCOLOR");
  if (c.failures) return 1;
  int an = 0, ar = 0, bn = 0, br = 0;
  ncclCommCount(a, &an);
  ncclCommUserRank(a, &ar);
  ncclCommCount(b, &bn);
  ncclCommUserRank(b, &br);
  const int expect_an = (world - rank % 2 + 1) / 2;
  int expect_ar = 0;  // members with larger rank of the same parity come first
  for (int k = rank + 2; k < world; k += 2) ++expect_ar;
  if (an != expect_an || ar != expect_ar || bn != std::min(2, world - (rank / 2) * 2) ||
      br != rank % 2) {
    std::fprintf(stderr, "rank %d: split shapes wrong: A %d/%d B %d/%d\n", rank, ar, an, br, bn);
    return 1;
  }
  if ((rank == 0) != (none == nullptr)) {
    std::fprintf(stderr, "rank %d: NOCOLOR split returned the wrong communicator\n", rank);
    return 1;
  }
  int none_n = 0;
  if (none != nullptr && (ncclCommCount(none, &none_n) != ncclSuccess || none_n != world - 1)) {
    std::fprintf(stderr, "rank %d: NOCOLOR split has %d ranks\n", rank, none_n);
    return 1;
  }
  CheckAllOps(comm, 1, c);
  // A and B at the same time from two threads: several communicators at once.
  Checker ca{c.where + " comm A"}, cb{c.where + " comm B"};
  std::thread ta([&] { CheckAllOps(a, 2, ca); });
  CheckAllOps(b, 3, cb);
  ta.join();
  if (none != nullptr) CheckAllOps(none, 4, c);
  ncclCommDestroy(none);
  ncclCommDestroy(b);
  ncclCommDestroy(a);
  ncclCommDestroy(comm);
  const int failures = c.failures + ca.failures + cb.failures;
  if (failures) std::fprintf(stderr, "rank %d: %d failures\n", rank, failures);
  return failures == 0 ? 0 : 1;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int RunServe(int rank, int world, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  ncclResult_t init = ncclCommInitRank(&comm, world, id, rank);
  if (init != ncclSuccess) {
    std::printf("init error %d\n", static_cast<int>(init));
    std::fflush(stdout);
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "allreduce") {
      const size_t count = 1024;
      std::vector<float> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(Input(ncclFloat32, ncclSum, rank, i, 9));
      ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), count, ncclFloat32, ncclSum, comm, nullptr);
      if (r != ncclSuccess) {
        std::printf("allreduce error %d\n", static_cast<int>(r));
      } else {
        bool all_nan = true;
        double max_rel = 0;
        for (size_t i = 0; i < count; ++i) {
          double want = 0;
          for (int k = 0; k < world; ++k) want += Input(ncclFloat32, ncclSum, k, i, 9);
          all_nan &= std::isnan(buf[i]);
          if (!std::isnan(buf[i]) && want != 0) max_rel = std::max(max_rel, std::fabs(buf[i] - want) / std::fabs(want));
          if (!std::isnan(buf[i]) && want == 0) max_rel = std::max(max_rel, std::fabs(static_cast<double>(buf[i])));
        }
        if (all_nan) {
          std::printf("allreduce nan\n");
        } else if (max_rel == 0) {
          std::printf("allreduce exact\n");
        } else {
          std::printf("allreduce off %.6g\n", max_rel);
        }
      }
    } else if (cmd == "pingpong") {
      int a = 0, b = 0, k = 0;
      in >> a >> b >> k;
      char buf[64] = {0};
      ncclResult_t r = ncclSuccess;
      const int64_t t0 = NowNs();
      for (int i = 0; i < k && r == ncclSuccess; ++i) {
        if (rank == a) {
          r = ncclSend(buf, sizeof(buf), ncclUint8, b, comm, nullptr);
          if (r == ncclSuccess) r = ncclRecv(buf, sizeof(buf), ncclUint8, b, comm, nullptr);
        } else if (rank == b) {
          r = ncclRecv(buf, sizeof(buf), ncclUint8, a, comm, nullptr);
          if (r == ncclSuccess) r = ncclSend(buf, sizeof(buf), ncclUint8, a, comm, nullptr);
        }
      }
      if (r != ncclSuccess) {
        std::printf("pingpong error %d\n", static_cast<int>(r));
      } else if (rank == a) {
        std::printf("pingpong %lld\n", static_cast<long long>(NowNs() - t0));
      } else {
        std::printf("pingpong skip\n");
      }
    } else if (cmd == "bulk") {
      int a = 0, b = 0;
      size_t bytes = 0;
      in >> a >> b >> bytes;
      std::vector<uint8_t> data(bytes);
      ncclResult_t r = ncclSuccess;
      const int64_t t0 = NowNs();
      if (rank == a) {
        for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 13);
        r = ncclSend(data.data(), bytes, ncclUint8, b, comm, nullptr);
        if (r == ncclSuccess) std::printf("bulk %lld\n", static_cast<long long>(NowNs() - t0));
      } else if (rank == b) {
        r = ncclRecv(data.data(), bytes, ncclUint8, a, comm, nullptr);
        bool ok = true;
        for (size_t i = 0; i < bytes; ++i) ok &= data[i] == static_cast<uint8_t>(i * 13);
        if (r == ncclSuccess) std::printf(ok ? "bulk ok\n" : "bulk bad\n");
      } else {
        std::printf("bulk skip\n");
      }
      if (r != ncclSuccess) std::printf("bulk error %d\n", static_cast<int>(r));
    } else if (cmd == "die") {
      _exit(9);
    } else if (cmd == "exit") {
      break;
    } else {
      std::printf("unknown command\n");
    }
    std::fflush(stdout);
  }
  ncclCommDestroy(comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = EnvInt("RANK"), world = EnvInt("WORLD_SIZE");
  ncclUniqueId id;
  if (argc < 2 || rank < 0 || world <= 0 || !DecodeId(std::getenv("PEREGRINE_TEST_NCCL_ID"), &id)) {
    std::fprintf(stderr, "usage: RANK=.. WORLD_SIZE=.. PEREGRINE_TEST_NCCL_ID=<hex> %s collectives|serve\n",
                 argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "collectives") return RunCollectives(rank, world, id);
  if (mode == "serve") return RunServe(rank, world, id);
  return 2;
}
