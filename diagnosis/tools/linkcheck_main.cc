// peregrine-linkcheck: communication validation (Falcon section 4.3, Figure 9): every
// rank of an NCCL world runs it; the world's ring (or binary-tree) links are split into
// O(1) rounds of disjoint point-to-point transfers (RingValidationRounds /
// TreeValidationRounds), each round's transfers run at the same time with equal sizes
// (ncclGroupStart / ncclSend / ncclRecv / ncclGroupEnd), the sender times each link, and
// rank 0 prints one JSON object with every link's time and JudgeLinkTimes' verdict:
//   {"world":4,"topology":"ring","bytes":1048576,"repeats":3,
//    "links":[{"round":0,"sender":0,"receiver":1,"seconds":0.0012},...],
//    "verdict":{"median_seconds":...,"slow_links":[{"sender":1,"receiver":2,"seconds":...,"ratio":...}],
//               "slow_ranks":[{"rank":...,"links":...,"mean_ratio":...}]}}
// A link's time is the median over --repeats exchanges of (--bytes from sender to receiver,
// then a 4-byte acknowledgement back), timed by the sender. Every round starts after a world
// barrier (an all-reduce), so rounds do not overlap; the barrier releases ranks at
// different times when a link is slow, so each pair first makes one untimed exchange that
// aligns the two ends, and only the exchanges after it are timed.
//
// Environment (like sim-trainer / torchrun): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (rank 0 serves the ncclUniqueId there), LOCAL_RANK (the CUDA device with
// --device-buffers, default auto: device memory on a real GPU outside the stand-in cluster,
// diagnosis/tools/device_memory.h). Flags: --bytes N (default 1 MiB), --repeats N
// (default 3), --topology ring|tree, --slow-ratio R (default 1.1), --init-timeout-s N,
// --plan "r0:s>d,s>d;r1:..." (run exactly these rounds instead of the topology's: the
// stop-time p2p_rounds diagnostic, agent/diagnostics/README.md), --all-ranks (every rank
// prints the JSON, not only rank 0; each knows every link's time after the final gather).
// Exit code: 0 all links healthy, 1 a slow link or rank was found, 2 usage, 3 NCCL or
// rendezvous error.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "diagnosis/link_plan.h"
#include "diagnosis/link_rounds.h"
#include "diagnosis/tools/collective_tool.h"
#include "diagnosis/tools/device_memory.h"
#include "diagnosis/tools/nccl_world.h"
#include "nccl.h"

namespace peregrine {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  NcclWorld w;  // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK
  size_t bytes = 1 << 20;
  int repeats = 3;
  std::string topology = "ring";
  double slow_ratio = 1.1;
  int init_timeout_ms = 120000;
  std::string plan;        // non-empty: these rounds
  bool all_ranks = false;  // every rank prints the report
  std::string device_buffers = "auto";
};

constexpr CollectiveTool kTool(
    "peregrine-linkcheck",
    "[--bytes N] [--repeats N] [--topology ring|tree] [--slow-ratio R] [--init-timeout-s N]\n"
    "       [--plan r0:s>d,...;r1:...] [--all-ranks] [--device-buffers auto|on|off]");

#define NCCL_CHECK(call) PEREGRINE_NCCL_CHECK(kTool, o.w.rank, call)

int Run(const Options& o) {
  // The plan, identical on every rank.
  ValidationRounds rounds;
  if (!o.plan.empty()) {
    absl::StatusOr<ValidationRounds> plan = ParseLinkRoundsPlan(o.plan, o.w.world);
    if (!plan.ok()) return kTool.Usage(absl::StrCat("--plan: ", plan.status().message()));
    rounds = *std::move(plan);
  } else if (o.topology == "ring") {
    auto r = RingValidationRounds(o.w.world);
    if (!r.ok()) return kTool.Usage(r.status().message());
    rounds = *r;
  } else {
    const std::vector<int> parents = HeapBinaryTreeParents(o.w.world);
    for (TreeDirection dir : {TreeDirection::kChildToParent, TreeDirection::kParentToChild}) {
      auto r = TreeValidationRounds(parents, dir);
      if (!r.ok()) return kTool.Usage(r.status().message());
      rounds.insert(rounds.end(), r->begin(), r->end());
    }
  }

  std::unique_ptr<DeviceMemory> mem;
  ncclComm_t comm = nullptr;
  if (int rc = kTool.Join(o.w, o.device_buffers, o.init_timeout_ms, &mem, &comm); rc != 0) return rc;

  const size_t count = std::max<size_t>(1, o.bytes / sizeof(float));
  const std::vector<float> ones(count, 1.0f);
  // The buffers NCCL sees: device memory on a real GPU, host memory on the stand-in.
  auto* send = static_cast<float*>(mem->Alloc(count * sizeof(float)));
  auto* recv = static_cast<float*>(mem->Alloc(count * sizeof(float)));
  auto* token = static_cast<float*>(mem->Alloc(sizeof(float)));
  auto* ack = static_cast<float*>(mem->Alloc(sizeof(float)));
  if (send == nullptr || recv == nullptr || token == nullptr || ack == nullptr ||
      !mem->ToDevice(send, ones.data(), count * sizeof(float))) {
    return kTool.RankError(o.w.rank, "cannot allocate buffers");
  }
  // measured[r] = this rank's median time as the sender of round r, -1 when not one.
  std::vector<double> measured(rounds.size(), -1.0);
  for (size_t r = 0; r < rounds.size(); ++r) {
    const LinkTransfer* mine = nullptr;
    for (const LinkTransfer& t : rounds[r]) {
      if (t.sender == o.w.rank || t.receiver == o.w.rank) mine = &t;
    }
    std::vector<double> times;
    NCCL_CHECK(ncclAllReduce(token, token, 1, ncclFloat32, ncclMax, comm, nullptr));  // barrier
    if (!mem->Synchronize()) return 3;
    for (int rep = 0; mine != nullptr && rep <= o.repeats; ++rep) {
      const auto start = Clock::now();
      NCCL_CHECK(ncclGroupStart());
      if (mine->sender == o.w.rank) NCCL_CHECK(ncclSend(send, count, ncclFloat32, mine->receiver, comm, nullptr));
      if (mine->receiver == o.w.rank) NCCL_CHECK(ncclRecv(recv, count, ncclFloat32, mine->sender, comm, nullptr));
      NCCL_CHECK(ncclGroupEnd());
      NCCL_CHECK(ncclGroupStart());
      if (mine->receiver == o.w.rank) NCCL_CHECK(ncclSend(ack, 1, ncclFloat32, mine->sender, comm, nullptr));
      if (mine->sender == o.w.rank) NCCL_CHECK(ncclRecv(ack, 1, ncclFloat32, mine->receiver, comm, nullptr));
      NCCL_CHECK(ncclGroupEnd());
      if (!mem->Synchronize()) return 3;
      if (rep > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (mine != nullptr && mine->sender == o.w.rank && !times.empty()) {
      std::sort(times.begin(), times.end());
      measured[r] = times[times.size() / 2];
    }
  }
  // Everyone's measurements to everyone (rank 0 reports).
  std::vector<double> all(rounds.size() * static_cast<size_t>(o.w.world), -1.0);
  if (!rounds.empty()) {
    auto* dmeasured = static_cast<double*>(mem->Alloc(measured.size() * sizeof(double)));
    auto* dall = static_cast<double*>(mem->Alloc(all.size() * sizeof(double)));
    if (dmeasured == nullptr || dall == nullptr ||
        !mem->ToDevice(dmeasured, measured.data(), measured.size() * sizeof(double))) {
      return 3;
    }
    NCCL_CHECK(ncclAllGather(dmeasured, dall, rounds.size(), ncclFloat64, comm, nullptr));
    if (!mem->Synchronize() || !mem->ToHost(all.data(), dall, all.size() * sizeof(double))) return 3;
  }
  ncclCommDestroy(comm);

  std::vector<LinkTime> times;
  std::vector<std::string> links;
  for (size_t r = 0; r < rounds.size(); ++r) {
    for (const LinkTransfer& t : rounds[r]) {
      const double s = all[static_cast<size_t>(t.sender) * rounds.size() + r];
      if (s < 0) continue;
      times.push_back(LinkTime{t.sender, t.receiver, s});
      links.push_back(absl::StrFormat(R"({"round":%d,"sender":%d,"receiver":%d,"seconds":%.6f})", r, t.sender,
                                      t.receiver, s));
    }
  }
  if (times.empty()) {
    if (o.w.rank == 0 || o.all_ranks) {
      std::printf("%s\n", absl::StrFormat(R"({"world":%d,"topology":"%s","links":[],"verdict":null})", o.w.world,
                                          o.topology).c_str());
    }
    return 0;
  }
  auto verdict = JudgeLinkTimes(times, o.slow_ratio);
  if (!verdict.ok()) {
    std::fprintf(stderr, "peregrine-linkcheck: %s\n", verdict.status().ToString().c_str());
    return 3;
  }
  std::vector<std::string> slow_links, slow_ranks;
  for (const SlowLink& l : verdict->slow_links) {
    slow_links.push_back(absl::StrFormat(R"({"sender":%d,"receiver":%d,"seconds":%.6f,"ratio":%.3f})", l.sender,
                                         l.receiver, l.seconds, l.ratio));
  }
  for (const SlowRank& s : verdict->slow_ranks) {
    slow_ranks.push_back(absl::StrFormat(R"({"rank":%d,"links":%d,"mean_ratio":%.3f})", s.rank, s.links, s.mean_ratio));
  }
  if (o.w.rank == 0 || o.all_ranks) {
    std::printf("%s\n", absl::StrCat(absl::StrFormat(R"({"world":%d,"topology":"%s","bytes":%d,"repeats":%d,)",
                                                     o.w.world, o.topology, count * sizeof(float), o.repeats),
                                     "\"links\":[", absl::StrJoin(links, ","), "],",
                                     absl::StrFormat(R"("verdict":{"median_seconds":%.6f,)", verdict->median_seconds),
                                     "\"slow_links\":[", absl::StrJoin(slow_links, ","), "],\"slow_ranks\":[",
                                     absl::StrJoin(slow_ranks, ","), "]}}")
                            .c_str());
    std::fflush(stdout);
  }
  return verdict->slow_links.empty() && verdict->slow_ranks.empty() ? 0 : 1;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) {
  using namespace peregrine;
  Options o;
  const int rc = kTool.ParseCommandLine(argc, argv, {"--all-ranks"}, [&o](const std::string& arg, const std::string& v) {
    int n = 0;
    if (arg == "--all-ranks") {
      o.all_ranks = true;
    } else if (arg == "--bytes" && absl::SimpleAtoi(v, &n) && n >= 4) {
      o.bytes = static_cast<size_t>(n);
    } else if (arg == "--repeats" && absl::SimpleAtoi(v, &n) && n >= 1) {
      o.repeats = n;
    } else if (arg == "--topology" && (v == "ring" || v == "tree")) {
      o.topology = v;
    } else if (arg == "--slow-ratio" && absl::SimpleAtod(v, &o.slow_ratio) && o.slow_ratio > 1) {
    } else if (arg == "--device-buffers" && (v == "auto" || v == "on" || v == "off")) {
      o.device_buffers = v;
    } else if (arg == "--plan" && !v.empty()) {
      o.plan = v;
      o.topology = "plan";
    } else if (arg == "--init-timeout-s" && absl::SimpleAtoi(v, &n) && n > 0) {
      o.init_timeout_ms = n * 1000;
    } else {
      return false;
    }
    return true;
  }, &o.w);
  return rc != 0 ? rc : Run(o);
}
