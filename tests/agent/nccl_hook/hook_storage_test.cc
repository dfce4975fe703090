// The hook's ring storage never endangers training: a ring that cannot be reserved in
// full (a full file system, a file-size limit) makes the hook forward NCCL calls
// unrecorded, the workload's results are unchanged, no ring file is left behind, and the
// reason is left where the agent looks (ListNcclRingFailures).
#ifdef PEREGRINE_HAVE_SIM_NCCL

#include <errno.h>
#include <sys/mount.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <memory>

#include "agent/nccl_ring/ring_reader.h"
#include "tests/agent/nccl_hook/probe_process.h"

namespace peregrine {
namespace {

using testing::Child;
using testing::TempDir;

// A tmpfs of `bytes` mounted on `dir` for the test's lifetime; ok() false when this
// process may not mount (not root / no CAP_SYS_ADMIN), with the reason in error().
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& dir, size_t bytes) : dir_(dir) {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0700";
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  std::string error_;
};

// Runs a 2-rank hooked workload whose processes start through `launcher` (prefix argv)
// with their rings in `ring_dir`; both must finish with correct results.
void RunPairAndExpectCorrectResults(const TempDir& scratch, const std::string& ring_dir,
                                    const std::vector<std::string>& launcher) {
  std::unique_ptr<Child> ranks[2];
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv = launcher;
    for (const std::string& a : {testing::ProbePath(), std::string("sim"), std::to_string(r),
                                 std::string("2"), scratch.path() + "/uid", std::string("10")}) {
      argv.push_back(a);
    }
    ranks[r] = std::make_unique<Child>(argv,
                                       std::map<std::string, std::string>{
                                           {"LD_LIBRARY_PATH", testing::SimNcclDir()},
                                           {"LD_PRELOAD", testing::HookPath()},
                                           {"PEREGRINE_NCCL_RING_DIR", ring_dir},
                                           {"PEREGRINE_NCCL_TIMEOUT_MS", ""},
                                           {"PEREGRINE_SIM_FAULTS", ""},
                                           {"RANK", std::to_string(r)}},
                                       scratch.path() + "/rank" + std::to_string(r) + ".out");
  }
  for (int r = 0; r < 2; ++r) {
    INFO(ranks[r]->Output());
    REQUIRE(ranks[r]->Wait() == 0);
    CHECK(ranks[r]->Values()["results_ok"] == "1");
    CHECK(ranks[r]->Output().find("NCCL calls are forwarded unrecorded") != std::string::npos);
  }
  auto rings = ListNcclRings(ring_dir);
  REQUIRE(rings.ok());
  CHECK(rings->empty());
}

TEST_CASE("hook on a full file system: forwards only, reports why, training unaffected",
          "[integration]") {
  TempDir scratch;
  const std::string ring_dir = scratch.path() + "/rings";
  std::filesystem::create_directories(ring_dir);
  // 64 KiB: room for the failure markers, far too small for a ring (over 4 MiB). Without
  // the reservation at creation, ftruncate succeeds on tmpfs and the first record
  // written past the available pages raises SIGBUS inside the training process.
  SmallTmpfs fs(ring_dir, 64 << 10);
  if (!fs.ok()) {
    WARN("skipped: cannot mount a small tmpfs here (" << fs.error() << "); needs root");
    return;
  }
  RunPairAndExpectCorrectResults(scratch, ring_dir, {});
  auto failures = ListNcclRingFailures(ring_dir);
  REQUIRE(failures.ok());
  REQUIRE(failures->size() == 2);
  for (int r = 0; r < 2; ++r) {
    CHECK((*failures)[r].global_rank == r);
    CHECK((*failures)[r].reason == "posix_fallocate: No space left on device");
    CHECK(!(*failures)[r].process_alive);
  }
}

TEST_CASE("hook under a file-size limit smaller than its ring: forwards only, no SIGXFSZ",
          "[integration]") {
  TempDir scratch;
  REQUIRE(std::filesystem::exists("/usr/bin/prlimit"));
  // 1 MiB limit: the markers fit, a ring does not. ftruncate past the limit would raise
  // SIGXFSZ, whose default action terminates the training process.
  RunPairAndExpectCorrectResults(scratch, scratch.path(),
                                 {"/usr/bin/prlimit", "--fsize=1048576"});
  auto failures = ListNcclRingFailures(scratch.path());
  REQUIRE(failures.ok());
  REQUIRE(failures->size() == 2);
  for (const NcclRingFailure& f : *failures) {
    CHECK(f.reason == "ring larger than RLIMIT_FSIZE");
  }
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_SIM_NCCL
