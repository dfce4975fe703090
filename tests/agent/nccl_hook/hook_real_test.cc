// libperegrine_nccl.so preloaded into a program linked against the REAL NCCL
// (/usr/local/cuda/lib64/libnccl.so.2) on a machine without a GPU: it loads, forwards,
// returns exactly what NCCL returns, and records the calls.
#include <catch2/catch.hpp>
#include <cinttypes>
#include <cstdio>
#include <filesystem>

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

TEST_CASE("hook over the real NCCL: same results, calls recorded", "[integration]") {
  TempDir dir;
  REQUIRE(!dir.path().empty());
  Child plain({testing::ProbePath(), "real"},
              {{"LD_LIBRARY_PATH", testing::kRealNcclDir}, {"LD_PRELOAD", ""}},
              dir.path() + "/plain.out");
  REQUIRE(plain.Wait() == 0);
  Child hooked({testing::ProbePath(), "real"},
               {{"LD_LIBRARY_PATH", testing::kRealNcclDir},
                {"LD_PRELOAD", testing::HookPath()},
                {"PEREGRINE_NCCL_RING_DIR", dir.path()},
                {"PEREGRINE_NCCL_PROFILING", "1"},
                {"RANK", "5"},
                {"LOCAL_RANK", "1"}},
               dir.path() + "/hooked.out");
  REQUIRE(hooked.Wait() == 0);

  auto want = plain.Values();
  auto got = hooked.Values();
  INFO("plain:\n" << plain.Output() << "hooked:\n" << hooked.Output());
  REQUIRE(want.count("version") == 1);
  CHECK(want["version"] == "22809");
  for (const char* key : {"version_rc", "version", "error_string", "uid_rc",
                          "allreduce_null_comm_rc", "send_null_comm_rc", "group_start_rc",
                          "group_end_rc", "group_start2_rc", "group_simulate_end_rc",
                          "revoke_null_comm_rc", "send_after_simulate_rc"}) {
    CHECK(got[key] == want[key]);
  }
  // Without a device NCCL rejects the null communicator; the hook passes that through.
  CHECK(got["allreduce_null_comm_rc"] == std::to_string(static_cast<int>(ncclInvalidArgument)));

  const std::string path =
      dir.path() + "/peregrine-nccl-r5-p" + std::to_string(hooked.pid()) + ".ring";
  auto reader = NcclRingReader::Open(path);
  REQUIRE(reader.ok());
  const NcclRingInfo info = (*reader)->Info();
  CHECK(info.pid == hooked.pid());
  CHECK(info.global_rank == 5);
  CHECK(info.local_rank == 1);
  CHECK(info.nccl_version == 22809);
  CHECK(std::filesystem::path(info.lib_path).filename() == "libnccl.so.2");
  CHECK(info.profiling);
  CHECK(info.cuda_state == 3);  // no GPU here: host timing only
  CHECK(info.dropped_records == 0);

  NcclPollResult poll = (*reader)->Poll(0);
  CHECK(poll.lost == 0);
  std::vector<std::string> ops;
  for (const NcclRecord& r : poll.records) ops.push_back(NcclOpName(r.op));
  CHECK(ops == std::vector<std::string>{"GetUniqueId", "AllReduce", "HostExit", "Send",
                                        "HostExit", "GroupStart", "HostExit", "GroupEnd",
                                        "HostExit", "GroupStart", "HostExit",
                                        "GroupSimulateEnd", "HostExit", "CommRevoke",
                                        "HostExit", "Send", "HostExit"});
  REQUIRE(poll.records.size() == 17);
  const NcclRecord& uid = poll.records[0];
  CHECK(Hex(uid.comm_id) == got["uid_hash"]);
  const NcclRecord& ar = poll.records[1];
  CHECK(ar.comm_id == 0);  // no communicator
  CHECK(ar.count == 1);
  CHECK(ar.datatype == ncclFloat32);
  CHECK(ar.flags == ring::kFlagProfiled);
  const NcclRecord& ar_exit = poll.records[2];
  CHECK(ar_exit.call_seq == ar.seq);
  CHECK(ar_exit.result == ncclInvalidArgument);
  CHECK(ar_exit.time_ns >= ar.time_ns);
  CHECK(ar_exit.value == ar_exit.time_ns - ar.time_ns);
  CHECK(poll.records[3].peer == 0);
  CHECK(poll.records[7].value == 1);  // GroupEnd closes depth 1
  CHECK(poll.records[11].value == 1);  // GroupSimulateEnd closes depth 1 too ...
  CHECK(poll.records[15].flags == ring::kFlagProfiled);  // ... so this Send is in no group
  CHECK(poll.records[13].count == 0);  // revokeFlags
  CHECK(poll.records[14].result == std::stoi(got["revoke_null_comm_rc"]));
  for (size_t i = 1; i < poll.records.size(); ++i) {
    CHECK(poll.records[i].time_ns >= poll.records[i - 1].time_ns);
  }
}

TEST_CASE("hook with PEREGRINE_NCCL_DISABLE=1 only forwards and creates no ring", "[integration]") {
  TempDir dir;
  Child hooked({testing::ProbePath(), "real"},
               {{"LD_LIBRARY_PATH", testing::kRealNcclDir},
                {"LD_PRELOAD", testing::HookPath()},
                {"PEREGRINE_NCCL_RING_DIR", dir.path()},
                {"PEREGRINE_NCCL_DISABLE", "1"}},
               dir.path() + "/hooked.out");
  REQUIRE(hooked.Wait() == 0);
  CHECK(hooked.Values()["version"] == "22809");
  auto list = ListNcclRings(dir.path());
  REQUIRE(list.ok());
  CHECK(list->empty());
}

}  // namespace
}  // namespace peregrine
