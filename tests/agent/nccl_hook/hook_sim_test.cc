// libperegrine_nccl.so preloaded into a 2-process workload on sim's stand-in
// libnccl.so.2: results unchanged, records and communicator identity consistent across
// ranks, communicators mapped to the layout's groups, trap mode pausing and releasing.
#ifdef PEREGRINE_HAVE_SIM_NCCL

#include <catch2/catch.hpp>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <tuple>

#include "diagnosis/comm_groups.h"
#include "agent/nccl_ring/ring_format.h"
#include "agent/nccl_ring/ring_reader.h"
#include "nccl.h"
#include "tests/agent/nccl_hook/probe_process.h"

namespace peregrine {
namespace {

namespace ring = nccl_ring;
using testing::Child;
using testing::Hex;
using testing::TempDir;
using testing::Eventually;

// Two probe ranks sharing a unique id through `dir`.
struct Pair {
  std::unique_ptr<Child> rank[2];
};

Pair StartPair(const TempDir& dir, int iterations, bool hooked,
               std::map<std::string, std::string> extra = {}) {
  Pair p;
  const std::string tag = hooked ? "hooked" : "plain";
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> env = {
        {"LD_LIBRARY_PATH", testing::SimNcclDir()},
        {"LD_PRELOAD", hooked ? testing::HookPath() : ""},
        {"PEREGRINE_NCCL_RING_DIR", dir.path()},
        {"PEREGRINE_NCCL_TIMEOUT_MS", ""},
        {"PEREGRINE_SIM_FAULTS", ""},
        {"RANK", std::to_string(r)}};
    for (const auto& [k, v] : extra) env[k] = v;
    p.rank[r] = std::make_unique<Child>(
        std::vector<std::string>{testing::ProbePath(), "sim", std::to_string(r), "2",
                                 dir.path() + "/uid-" + tag, std::to_string(iterations)},
        env, dir.path() + "/" + tag + std::to_string(r) + ".out");
  }
  return p;
}

std::string RingPath(const TempDir& dir, int rank, pid_t pid) {
  return dir.path() + "/peregrine-nccl-r" + std::to_string(rank) + "-p" + std::to_string(pid) +
         ".ring";
}

// Opens the ring once its process has created it.
std::unique_ptr<NcclRingReader> OpenWhenReady(const std::string& path) {
  std::unique_ptr<NcclRingReader> reader;
  Eventually([&] {
    auto r = NcclRingReader::Open(path);
    if (!r.ok()) return false;
    reader = std::move(*r);
    return true;
  });
  return reader;
}

TEST_CASE("hook over sim NCCL: 2 ranks, results unchanged, consistent records", "[integration]") {
  TempDir dir;
  constexpr int kIterations = 20;
  Pair plain = StartPair(dir, kIterations, /*hooked=*/false);
  Pair hooked = StartPair(dir, kIterations, /*hooked=*/true);
  for (int r = 0; r < 2; ++r) {
    INFO(plain.rank[r]->Output() << hooked.rank[r]->Output());
    REQUIRE(plain.rank[r]->Wait() == 0);
    REQUIRE(hooked.rank[r]->Wait() == 0);
    CHECK(plain.rank[r]->Values()["results_ok"] == "1");
    CHECK(hooked.rank[r]->Values()["results_ok"] == "1");
  }
  const std::string uid_hash = hooked.rank[0]->Values()["uid_hash"];

  std::vector<NcclRecord> records[2];
  std::vector<NcclCommInfo> comms[2];
  std::vector<CommObservation> observations;
  for (int r = 0; r < 2; ++r) {
    auto reader = NcclRingReader::Open(RingPath(dir, r, hooked.rank[r]->pid()));
    REQUIRE(reader.ok());
    NcclPollResult poll = (*reader)->Poll(0);
    CHECK(poll.lost == 0);
    records[r] = poll.records;
    comms[r] = (*reader)->Comms();
    CHECK((*reader)->Info().global_rank == r);
    CHECK(std::filesystem::path((*reader)->Info().lib_path).parent_path() ==
          std::filesystem::path(testing::SimNcclDir()));
    for (const NcclCommInfo& c : comms[r]) {
      observations.push_back({c.comm_id, c.global_rank, c.rank, c.nranks});
    }
  }

  // Communicator table: the root communicator is the unique id's hash on both ranks; the
  // split child gets the same id on both; both destroyed at the end.
  for (int r = 0; r < 2; ++r) {
    REQUIRE(comms[r].size() == 2);
    const NcclCommInfo& root = comms[r][0];
    const NcclCommInfo& child = comms[r][1];
    CHECK(Hex(root.comm_id) == uid_hash);
    CHECK(root.rank == r);
    CHECK(root.nranks == 2);
    CHECK(root.global_rank == r);
    CHECK(root.created_by == ring::kOpCommInitRank);
    CHECK(child.parent_id == root.comm_id);
    CHECK(child.created_by == ring::kOpCommSplit);
    CHECK(child.rank == r);  // key = rank keeps the order
    CHECK(child.nranks == 2);
    CHECK(child.color == 0);
    CHECK(child.key == r);
    CHECK(child.comm_id != root.comm_id);
    CHECK(root.destroyed_ns != 0);
    CHECK(child.destroyed_ns >= child.created_ns);
  }
  CHECK(comms[0][1].comm_id == comms[1][1].comm_id);

  // The same traffic, call for call, on both ranks: what the agent matches across ranks.
  using Key = std::tuple<uint8_t, uint64_t, uint64_t, uint64_t, uint8_t, uint8_t>;
  std::vector<Key> traffic[2];
  for (int r = 0; r < 2; ++r) {
    int allreduce = 0, send = 0, recv = 0;
    for (const NcclRecord& rec : records[r]) {
      if (!IsNcclTrafficOp(rec.op)) continue;
      traffic[r].emplace_back(rec.op, rec.comm_id, rec.call_index, rec.count, rec.datatype,
                              rec.flags);
      CHECK(rec.rank == r);
      CHECK(rec.nranks == 2);
      CHECK(rec.count == 64);
      CHECK(rec.datatype == ncclFloat32);
      if (rec.op == ring::kOpAllReduce) ++allreduce;
      if (rec.op == ring::kOpSend) {
        ++send;
        CHECK(rec.peer == 1 - r);
        CHECK((rec.flags & ring::kFlagInGroup) != 0);
      }
      if (rec.op == ring::kOpRecv) ++recv;
    }
    CHECK(allreduce == 2 * kIterations);
    CHECK(send == kIterations);
    CHECK(recv == kIterations);
    for (size_t i = 1; i < records[r].size(); ++i) {
      CHECK(records[r][i].seq == records[r][i - 1].seq + 1);
      CHECK(records[r][i].time_ns >= records[r][i - 1].time_ns);
    }
  }
  CHECK(traffic[0] == traffic[1]);
  CHECK(std::count_if(records[0].begin(), records[0].end(),
                      [](const NcclRecord& r) { return r.op == ring::kOpGetUniqueId; }) == 1);

  // Both communicators span the 2-rank world: with TP=2 they are the TP group.
  auto layout = ParallelLayout::Create(2, 1, 1, 2);
  REQUIRE(layout.ok());
  auto matches = MatchCommsToGroups(observations, *layout);
  REQUIRE(matches.ok());
  REQUIRE(matches->size() == 2);
  for (const CommGroupMatch& m : *matches) {
    CHECK(m.complete);
    CHECK(m.world);
    REQUIRE(m.kind.has_value());
    CHECK(*m.kind == GroupKind::kTensor);
    CHECK(m.members == std::vector<int>{0, 1});
  }
}

// PyTorch's case: Python opens the extension module with RTLD_LOCAL, so the module and
// the libnccl.so.2 it needs sit in a local scope. The module's calls still bind to the
// preloaded hook, but RTLD_NEXT from the hook cannot see that libnccl.so.2: without the
// fallback every wrapper forwarded to nothing and every NCCL call of the job failed (seen
// with PyTorch 2.11 and NCCL 2.28.9 on a GPU machine). Here Python's ctypes opens a small
// library linked to sim's libnccl.so.2 the same way.
TEST_CASE("hook over an NCCL library in a local scope (RTLD_LOCAL, as Python loads PyTorch) forwards and records", "[integration]") {
  TempDir dir;
  constexpr int kIterations = 12;
  const std::string library = std::string(PEREGRINE_BINARY_DIR) + "/lib/libnccl_probe_local.so";
  const std::string script =
      "import ctypes, os, sys\n"
      "lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)\n"
      "sys.exit(lib.PeregrineProbeLocal(int(sys.argv[2])))\n";
  Child hooked({"/usr/bin/python3", "-c", script, library, std::to_string(kIterations)},
               {{"LD_LIBRARY_PATH", testing::SimNcclDir()},
                {"LD_PRELOAD", testing::HookPath()},
                {"PEREGRINE_NCCL_RING_DIR", dir.path()},
                {"PEREGRINE_NCCL_TIMEOUT_MS", ""},
                {"PEREGRINE_SIM_FAULTS", ""},
                {"RANK", "0"}},
               dir.path() + "/local.out");
  INFO(hooked.Output());
  REQUIRE(hooked.Wait() == 0);
  CHECK(hooked.Values()["results_ok"] == "1");

  auto reader = NcclRingReader::Open(RingPath(dir, 0, hooked.pid()));
  REQUIRE(reader.ok());
  CHECK(std::filesystem::path((*reader)->Info().lib_path).parent_path() ==
        std::filesystem::path(testing::SimNcclDir()));
  const NcclPollResult poll = (*reader)->Poll(0);
  CHECK(poll.lost == 0);
  int allreduce = 0;
  for (const NcclRecord& rec : poll.records) allreduce += rec.op == ring::kOpAllReduce ? 1 : 0;
  CHECK(allreduce == kIterations);
}

TEST_CASE("trap mode pauses both ranks at call boundaries and releases them", "[integration]") {
  TempDir dir;
  constexpr int kIterations = 20000;
  Pair hooked = StartPair(dir, kIterations, /*hooked=*/true, {{"PEREGRINE_NCCL_TRAP", "1"}});
  std::unique_ptr<NcclRingReader> reader[2];
  for (int r = 0; r < 2; ++r) {
    reader[r] = OpenWhenReady(RingPath(dir, r, hooked.rank[r]->pid()));
    REQUIRE(reader[r] != nullptr);
  }
  auto trapped = [&](int r, uint64_t total) {
    const NcclRingInfo i = reader[r]->Info();
    return i.trapped_now == 1 && i.trapped_total >= total;
  };
  // Phase 1: started trapped: both wait at their first call (CommInitRank).
  REQUIRE(Eventually([&] { return trapped(0, 1) && trapped(1, 1); }));
  const uint64_t start0 = reader[0]->Info().write_index;
  const uint64_t start1 = reader[1]->Info().write_index;
  // Nothing moves while trapped (a window, not a wait for a condition).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(reader[0]->Info().write_index == start0);
  CHECK(reader[1]->Info().write_index == start1);
  CHECK(reader[0]->Info().trapped_now == 1);
  CHECK(reader[1]->Info().trapped_now == 1);

  // Phase 2: one release epoch lets the waiting calls through; the trap stays armed,
  // so both stop again at their next call (CommSplit).
  reader[0]->Release();
  reader[1]->Release();
  REQUIRE(Eventually([&] { return trapped(0, 2) && trapped(1, 2); }));
  for (int r = 0; r < 2; ++r) {
    NcclPollResult poll = reader[r]->Poll(0);
    REQUIRE(!poll.records.empty());
    const NcclRecord& last = poll.records.back();
    CHECK(NcclOpName(last.op) == "CommInitRank");
    CHECK((last.flags & ring::kFlagTrapped) != 0);
    CHECK(reader[r]->Comms().size() == 1);
  }

  // Phase 3: clear the trap; training runs; trap it again while it runs.
  reader[0]->SetTrap(false);
  reader[1]->SetTrap(false);
  auto traffic = [&](int r) {
    size_t n = 0;
    for (const NcclRecord& rec : reader[r]->Poll(0).records) n += IsNcclTrafficOp(rec.op);
    return n;
  };
  REQUIRE(Eventually([&] { return traffic(0) >= 60 && traffic(1) >= 60; }));
  reader[0]->SetTrap(true);
  reader[1]->SetTrap(true);
  // A rank may be inside a collective waiting for its trapped peer, or reach the trap
  // just after a release: releasing the trapped ones one call at a time brings both to
  // the same boundary, both waiting there.
  REQUIRE(Eventually([&] { return trapped(0, 1) || trapped(1, 1); }));
  auto last_release = std::chrono::steady_clock::now();
  REQUIRE(Eventually([&] {
    if (trapped(0, 1) && trapped(1, 1)) return true;
    if (std::chrono::steady_clock::now() - last_release > std::chrono::milliseconds(50)) {
      reader[0]->Release();
      reader[1]->Release();
      last_release = std::chrono::steady_clock::now();
    }
    return false;
  }));
  const uint64_t w0 = reader[0]->Info().write_index;
  const uint64_t w1 = reader[1]->Info().write_index;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(reader[0]->Info().write_index == w0);
  CHECK(reader[1]->Info().write_index == w1);
  CHECK(hooked.rank[0]->Wait(std::chrono::seconds(0)) == -1);  // still running, paused
  CHECK(hooked.rank[1]->Wait(std::chrono::seconds(0)) == -1);

  // Phase 4: resume; training completes with correct results.
  reader[0]->SetTrap(false);
  reader[1]->SetTrap(false);
  for (int r = 0; r < 2; ++r) {
    INFO(hooked.rank[r]->Output());
    REQUIRE(hooked.rank[r]->Wait() == 0);
    CHECK(hooked.rank[r]->Values()["results_ok"] == "1");
    CHECK(reader[r]->Info().trapped_now == 0);
  }
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_SIM_NCCL
