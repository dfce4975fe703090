// The controller load test at CI size: 200 simulated agents (8 GPUs each) on real gRPC
// streams against the real peregrine-controller process in Kubernetes mode and the fake
// API server; 2% of the machines fail at once. Checks what must hold at any scale, not
// how fast: every agent connected and trained its slot, the controller reacted to the
// burst, every failed pod was deleted and its slot is held by a replacement on the new
// attempt, and nothing is left behind (streams, processes, file descriptors).
#include <dirent.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <iostream>

#include "absl/time/time.h"
#include "bench/controller_load/load_run.h"
#include "bench/controller_load/proc_stats.h"
#include "tests/testing/files.h"
#include "tests/testing/process_guard.h"

namespace peregrine::loadtest {
namespace {

int OpenFds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

TEST_CASE("200 agents: all connect, a burst of failed machines is replaced, nothing leaks", "[e2e]") {
  testing::DescendantGuard guard;
  const int fds_before = OpenFds();
  LoadTestOptions o;
  o.controller_binary = testing::BinaryPath("bin/peregrine-controller");
  o.machines = 200;
  o.standbys = 2;
  o.burst_fraction = 0.02;  // 4 machines, more than the standby pool: new pods too
  o.settle = absl::Seconds(1);
  o.steady = absl::Seconds(3);
  o.startup_deadline = absl::Minutes(4);
  o.recovery_deadline = absl::Minutes(3);
  o.log_level = "info";
  o.progress = [](const std::string& line) { std::cerr << "controller-load: " << line << "\n"; };
  absl::StatusOr<LoadReport> report = RunControllerLoad(o);
  REQUIRE(report.ok());
  const LoadReport& r = *report;
  std::cout << FormatLoadReport(r);

  CHECK(r.standbys == 2);
  CHECK(r.connected_before_burst == o.machines + r.standbys);
  CHECK(r.burst_machines == 4);
  // The controller decided: the status showed the recovery, the failed pods were deleted
  // (each once: the delete counts below), and new pods were created for the slots the
  // standbys could not fill and to refill the pool.
  CHECK(r.first_reacting_status.has_value());
  CHECK(r.decision.has_value());
  CHECK(r.failed_pods_deleted == r.burst_machines);
  CHECK(r.recovery_requests.count({"delete", "pods"}) == 1);
  CHECK(r.recovery_requests.at({"delete", "pods"}) == r.burst_machines);
  CHECK(r.recovery_requests.count({"create", "pods"}) == 1);
  CHECK(r.recovery_requests.at({"create", "pods"}) >= r.burst_machines);
  CHECK(r.replaced == r.burst_machines);
  CHECK(r.evictions == r.burst_machines);
  CHECK(r.kubelet_errors == 0);
  // Every slot held again by a connected agent (the run waited for it); no agent was
  // refused, every stream ended at shutdown.
  CHECK(r.fleet.rejects == 0);
  CHECK(r.open_streams_after_shutdown == 0);
  CHECK(r.steady_cpu_cores > 0);  // the sampler read the controller
  CHECK(r.peak_rss_kib >= r.steady_rss_kib);
  CHECK(testing::NoDescendantsLeft());
  CHECK(OpenFds() <= fds_before + 8);  // gRPC keeps a few of its own (epoll, wakeup fds)
}

TEST_CASE("proc stats: utime and stime after a command name with spaces and parentheses", "[unit]") {
  const std::string stat =
      "4242 (peregrine (x) y) S 1 4242 4242 0 -1 4194560 1200 0 0 0 1500 250 0 0 20 0 12 0 300 123456 789 "
      "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0";
  absl::StatusOr<uint64_t> ticks = ParseProcStatCpu(stat);
  REQUIRE(ticks.ok());
  CHECK(*ticks == 1750);
  CHECK(absl::IsInvalidArgument(ParseProcStatCpu("4242 peregrine S 1").status()));
  CHECK(absl::IsInvalidArgument(ParseProcStatCpu("4242 (p) S 1 2 3").status()));  // truncated
  CHECK(absl::IsInvalidArgument(ParseProcStatCpu("4242 (p) S 1 4242 4242 0 -1 0 0 0 0 0 x 250").status()));
}

TEST_CASE("proc stats: VmRSS and VmHWM of a status file, missing and malformed lines named", "[unit]") {
  const std::string status = "Name:\tperegrine-contr\nVmPeak:\t  900000 kB\nVmHWM:\t  612345 kB\nVmRSS:\t  500001 kB\n";
  absl::StatusOr<ProcMemory> m = ParseProcStatusMemory(status);
  REQUIRE(m.ok());
  CHECK(m->peak_kib == 612345);
  CHECK(m->rss_kib == 500001);
  absl::StatusOr<ProcMemory> no_hwm = ParseProcStatusMemory("VmRSS:\t 1 kB\n");
  REQUIRE(!no_hwm.ok());
  CHECK(no_hwm.status().message().find("VmHWM") != std::string::npos);
  absl::StatusOr<ProcMemory> bad = ParseProcStatusMemory("VmHWM:\t 1 MB\nVmRSS:\t 1 kB\n");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("VmHWM:\t 1 MB") != std::string::npos);
  CHECK(CoreShare(absl::Seconds(1), absl::Seconds(3), absl::Seconds(4)) == Approx(0.5));
  // The reader on a live process: this one.
  REQUIRE(ProcessMemory(::getpid()).ok());
  REQUIRE(ProcessCpuTime(::getpid()).ok());
}

}  // namespace
}  // namespace peregrine::loadtest
