// The stand-in NCCL against a CPU reference, with real processes and several
// communicators at once, plus the single-process ncclCommInitAll path.
#include <cstring>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "nccl.h"
#include "tests/sim/sim_test_util.h"

namespace peregrine::testing {
namespace {

TEST_CASE("stand-in NCCL: every op and dtype across 4 processes and split comms", "[integration]") {
  const int world = 4;
  const std::string id = NewIdHex();
  REQUIRE(!id.empty());
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < world; ++r) {
    ChildProcess::Options o;
    o.argv = {WorkerPath(), "collectives"};
    o.env = {{"RANK", std::to_string(r)},
             {"WORLD_SIZE", std::to_string(world)},
             {"PEREGRINE_TEST_NCCL_ID", id},
             {"PEREGRINE_MACHINE_ID", std::to_string(r / 2)},
             {"LOCAL_RANK", std::to_string(r % 2)},
             {"PEREGRINE_SIM_FAULTS", ""}};
    ranks.push_back(ChildProcess::Start(o));
    REQUIRE(ranks.back() != nullptr);
  }
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " (mismatches, if any, are on stderr)");
    CHECK(ExitedWith(ranks[r]->Wait(kGenerous), 0));
  }
}

TEST_CASE("stand-in NCCL: ncclCommInitAll and a grouped all-reduce over its comms", "[unit]") {
  const int ndev = 3;
  std::vector<ncclComm_t> comms(ndev, nullptr);
  REQUIRE(ncclCommInitAll(comms.data(), ndev, nullptr) == ncclSuccess);
  std::vector<std::vector<double>> bufs(ndev, std::vector<double>(1000));
  for (int d = 0; d < ndev; ++d) {
    for (size_t i = 0; i < 1000; ++i) bufs[d][i] = d * 1000.0 + i;
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int d = 0; d < ndev; ++d) {
    REQUIRE(ncclAllReduce(bufs[d].data(), bufs[d].data(), 1000, ncclFloat64, ncclSum, comms[d],
                          nullptr) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int d = 0; d < ndev; ++d) {
    int rank = -1, count = 0;
    CHECK(ncclCommUserRank(comms[d], &rank) == ncclSuccess);
    CHECK(ncclCommCount(comms[d], &count) == ncclSuccess);
    CHECK(rank == d);
    CHECK(count == ndev);
    for (size_t i = 0; i < 1000; i += 97) CHECK(bufs[d][i] == 3000.0 + 3.0 * i);
  }
  for (ncclComm_t c : comms) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

TEST_CASE("stand-in NCCL: version and error strings and argument checks", "[unit]") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  CHECK(std::string(ncclGetErrorString(ncclRemoteError)).find("remote process") != std::string::npos);
  CHECK(std::string(ncclGetErrorString(static_cast<ncclResult_t>(99))) == "unknown result code");
  ncclComm_t comm = nullptr;
  ncclUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof(garbage));
  CHECK(ncclCommInitRank(&comm, 2, garbage, 0) == ncclInvalidArgument);
  std::vector<ncclComm_t> one(1);
  REQUIRE(ncclCommInitAll(one.data(), 1, nullptr) == ncclSuccess);
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat8e4m3, ncclSum, one[0], nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, static_cast<ncclRedOp_t>(9), one[0], nullptr) ==
        ncclInvalidArgument);
  CHECK(ncclSend(&x, 1, ncclFloat32, 5, one[0], nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclAvg, one[0], nullptr) == ncclSuccess);
  CHECK(x == 1.0f);
  CHECK(ncclCommDestroy(one[0]) == ncclSuccess);
}

}  // namespace
}  // namespace peregrine::testing
