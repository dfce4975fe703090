// peregrine-nccl-check: collective validation for stop-time diagnosis. Every rank of an NCCL
// world runs it; the ranks run one collective over a known pattern, verify what arrived bit
// for bit and time it (the nccl-tests conventions for bandwidth):
//   --op all_to_all  grouped ncclSend/ncclRecv of --bytes to every peer (itself included);
//                    algbw = bytes * world / time, busbw = algbw * (world - 1) / world
//   --op all_gather  ncclAllGather of --bytes per rank;
//                    algbw = bytes * world / time, busbw = algbw * (world - 1) / world
// peak_busbw_gbps is the same figure for the fastest run.
// The element j of what rank s sends to rank d is the float 1 + ((s*7919 + d*104729 +
// j*31) mod 65521) (for all_gather d = 0): exact integers, so any perturbation shows. The
// time is the median of --repeats runs after one untimed warm-up; contents are checked on
// every run.
// Output: one JSON line per rank:
//   {"rank":R,"world":N,"op":"all_to_all","bytes":B,"seconds":S,"algbw_gbps":A,"busbw_gbps":U,
//    "peak_busbw_gbps":P,"bad_senders":[...],"nan_senders":[...]}
// Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (rank 0 serves the ncclUniqueId),
// LOCAL_RANK (the CUDA device with --device-buffers, default auto: device_memory.h).
// Exit code: 0 contents verified, 1 some contents wrong, 2 usage, 3 NCCL or rendezvous error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "diagnosis/tools/collective_tool.h"
#include "diagnosis/tools/device_memory.h"
#include "diagnosis/tools/nccl_world.h"
#include "nccl.h"

namespace peregrine {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  NcclWorld w;  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK
  std::string op = "all_to_all";
  size_t bytes = 1 << 20;
  int repeats = 3;
  int init_timeout_ms = 120000;
  std::string device_buffers = "auto";
};

constexpr CollectiveTool kTool(
    "peregrine-nccl-check",
    "[--op all_to_all|all_gather] [--bytes N] [--repeats N] [--init-timeout-s N] [--device-buffers auto|on|off]");

float Pattern(int sender, int receiver, size_t j) {
  const uint64_t v = (static_cast<uint64_t>(sender) * 7919 + static_cast<uint64_t>(receiver) * 104729 + j * 31) % 65521;
  return static_cast<float>(1 + v);
}

#define NCCL_CHECK(call) PEREGRINE_NCCL_CHECK(kTool, o.w.rank, call)

int Run(const Options& o) {
  std::unique_ptr<DeviceMemory> mem;
  ncclComm_t comm = nullptr;
  if (int rc = kTool.Join(o.w, o.device_buffers, o.init_timeout_ms, &mem, &comm); rc != 0) return rc;
  const size_t count = std::max<size_t>(1, o.bytes / sizeof(float));
  const size_t n = static_cast<size_t>(o.w.world);
  const bool all_to_all = o.op == "all_to_all";
  std::vector<float> send(all_to_all ? count * n : count), recv(count * n), zeros(count * n, 0.0f);
  for (size_t d = 0; d < (all_to_all ? n : 1); ++d) {
    for (size_t j = 0; j < count; ++j) send[d * count + j] = Pattern(o.w.rank, static_cast<int>(d), j);
  }
  // The buffers NCCL sees: device memory on a real GPU, host memory on the stand-in.
  auto* dsend = static_cast<float*>(mem->Alloc(send.size() * sizeof(float)));
  auto* drecv = static_cast<float*>(mem->Alloc(recv.size() * sizeof(float)));
  auto* dtoken = static_cast<float*>(mem->Alloc(sizeof(float)));
  if (dsend == nullptr || drecv == nullptr || dtoken == nullptr ||
      !mem->ToDevice(dsend, send.data(), send.size() * sizeof(float))) {
    return kTool.RankError(o.w.rank, "cannot allocate or fill buffers");
  }
  std::set<int> bad, nan;
  std::vector<double> times;
  for (int rep = 0; rep <= o.repeats; ++rep) {
    if (!mem->ToDevice(drecv, zeros.data(), zeros.size() * sizeof(float))) return 3;
    NCCL_CHECK(ncclAllReduce(dtoken, dtoken, 1, ncclFloat32, ncclMax, comm, nullptr));  // start together
    if (!mem->Synchronize()) return 3;
    const auto start = Clock::now();
    if (all_to_all) {
      NCCL_CHECK(ncclGroupStart());
      for (size_t p = 0; p < n; ++p) {
        NCCL_CHECK(ncclSend(dsend + p * count, count, ncclFloat32, static_cast<int>(p), comm, nullptr));
        NCCL_CHECK(ncclRecv(drecv + p * count, count, ncclFloat32, static_cast<int>(p), comm, nullptr));
      }
      NCCL_CHECK(ncclGroupEnd());
    } else {
      NCCL_CHECK(ncclAllGather(dsend, drecv, count, ncclFloat32, comm, nullptr));
    }
    if (!mem->Synchronize()) {
      return kTool.RankError(o.w.rank, "device synchronize failed");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (!mem->ToHost(recv.data(), drecv, recv.size() * sizeof(float))) return 3;
    if (rep > 0) times.push_back(seconds);
    for (size_t s = 0; s < n; ++s) {
      const int receiver = all_to_all ? o.w.rank : 0;
      for (size_t j = 0; j < count; ++j) {
        const float got = recv[s * count + j];
        const float want = Pattern(static_cast<int>(s), receiver, j);
        if (std::memcmp(&got, &want, sizeof(float)) != 0) {
          bad.insert(static_cast<int>(s));
          if (std::isnan(got)) nan.insert(static_cast<int>(s));
          break;
        }
      }
    }
  }
  ncclCommDestroy(comm);
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0 : times[times.size() / 2];
  const double total_bytes = static_cast<double>(count * sizeof(float)) * static_cast<double>(n);
  const double algbw = median > 0 ? total_bytes / median / 1e9 : 0;
  const double busbw = algbw * static_cast<double>(n - 1) / static_cast<double>(n);
  // The fastest run: what the links can do. A capped link bounds every run; scheduling noise
  // on a shared host only slows some, so peers are best compared on this figure.
  const double fastest = times.empty() ? 0 : times.front();
  const double peak_busbw = fastest > 0 ? total_bytes / fastest / 1e9 * static_cast<double>(n - 1) / static_cast<double>(n) : 0;
  std::printf("%s\n", absl::StrFormat(R"({"rank":%d,"world":%d,"op":"%s","bytes":%d,"seconds":%.9f,)"
                                      R"("algbw_gbps":%.6f,"busbw_gbps":%.6f,"peak_busbw_gbps":%.6f,"bad_senders":[%s],"nan_senders":[%s],"device_buffers":%s})",
                                      o.w.rank, o.w.world, o.op, count * sizeof(float), median, algbw, busbw, peak_busbw,
                                      absl::StrJoin(bad, ","), absl::StrJoin(nan, ","),
                                      mem->on_device() ? "true" : "false")
                          .c_str());
  std::fflush(stdout);
  return bad.empty() ? 0 : 1;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) {
  using namespace peregrine;
  Options o;
  const int rc = kTool.ParseCommandLine(argc, argv, {}, [&o](const std::string& arg, const std::string& v) {
    int64_t n = 0;
    if (arg == "--op" && (v == "all_to_all" || v == "all_gather")) {
      o.op = v;
    } else if (arg == "--bytes" && absl::SimpleAtoi(v, &n) && n >= 4 && n <= (int64_t{1} << 30)) {
      o.bytes = static_cast<size_t>(n);
    } else if (arg == "--repeats" && absl::SimpleAtoi(v, &n) && n >= 1 && n <= 1000) {
      o.repeats = static_cast<int>(n);
    } else if (arg == "--device-buffers" && (v == "auto" || v == "on" || v == "off")) {
      o.device_buffers = v;
    } else if (arg == "--init-timeout-s" && absl::SimpleAtoi(v, &n) && n > 0 && n <= 86400) {
      o.init_timeout_ms = static_cast<int>(n * 1000);
    } else {
      return false;
    }
    return true;
  }, &o.w);
  return rc != 0 ? rc : Run(o);
}
