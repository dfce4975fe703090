// controller-load: the controller load test (bench/controller_load/load_run.h) from the
// command line. Prints a line per phase on stderr and the figures on stdout; exits 0
// when the run completed (whatever the figures), 1 when it could not, 2 on bad flags.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/controller_load/load_run.h"

namespace {

constexpr char kUsage[] =
    "usage: controller-load [options]\n"
    "  --agents N                 simulated machines, one agent each (default 12500)\n"
    "  --gpus-per-machine N       (default 8)\n"
    "  --standbys N               spec.standby.min = max (default: the controller sizes the pool)\n"
    "  --burst-fraction F         machines failed at once (default 0.01)\n"
    "  --settle-s N               wait after startup before measuring (default 10)\n"
    "  --steady-s N               the measured steady window (default 60)\n"
    "  --startup-deadline-s N     (default 1800)\n"
    "  --recovery-deadline-s N    (default 300)\n"
    "  --ticker-threads N         threads sending heartbeats and connecting (default 2)\n"
    "  --streams-per-connection N agents sharing one gRPC connection (default 1: one each)\n"
    "  --step-s F                 the simulated training's iteration time (default 1)\n"
    "  --history N                write events the fake API server keeps (default 2000)\n"
    "  --controller PATH          peregrine-controller (default: beside this binary)\n"
    "  --log-level L              the controller's (default warning)\n"
    "  --work-dir DIR             keep kubeconfig, key and controller.log here (default: a temp dir)\n"
    "  --seed N                   (default 1)\n";

int Usage(const std::string& error) {
  std::fprintf(stderr, "controller-load: %s\n%s", error.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Tens of thousands of mutexes (two per simulated agent): the lock-order graph of
  // Abseil's deadlock detection, on in this distribution's library, would cost this
  // process more than the agents themselves.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  peregrine::loadtest::LoadTestOptions o;
  o.controller_binary = (std::filesystem::path(std::filesystem::canonical("/proc/self/exe")).parent_path() /
                         "peregrine-controller").string();
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= args.size()) return Usage(absl::StrCat(flag, ": needs a value (or unknown flag)"));
    const std::string& v = args[++i];
    int n = 0;
    double f = 0;
    auto integer = [&](int min) { return absl::SimpleAtoi(v, &n) && n >= min; };
    auto seconds = [&]() { return absl::SimpleAtod(v, &f) && f > 0; };
    if (flag == "--agents") {
      if (!integer(1)) return Usage(absl::StrCat("--agents: expected a count >= 1, got '", v, "'"));
      o.machines = n;
    } else if (flag == "--gpus-per-machine") {
      if (!integer(1)) return Usage(absl::StrCat("--gpus-per-machine: expected a count >= 1, got '", v, "'"));
      o.gpus_per_machine = n;
    } else if (flag == "--standbys") {
      if (!integer(0)) return Usage(absl::StrCat("--standbys: expected a count >= 0, got '", v, "'"));
      o.standbys = n;
    } else if (flag == "--burst-fraction") {
      if (!absl::SimpleAtod(v, &f) || !(f > 0 && f <= 1)) return Usage(absl::StrCat("--burst-fraction: expected (0, 1], got '", v, "'"));
      o.burst_fraction = f;
    } else if (flag == "--settle-s" || flag == "--steady-s" || flag == "--startup-deadline-s" ||
               flag == "--recovery-deadline-s" || flag == "--step-s") {
      if (!seconds()) return Usage(absl::StrCat(flag, ": expected seconds > 0, got '", v, "'"));
      const absl::Duration d = absl::Seconds(f);
      (flag == "--settle-s"             ? o.settle
       : flag == "--steady-s"           ? o.steady
       : flag == "--startup-deadline-s" ? o.startup_deadline
       : flag == "--recovery-deadline-s" ? o.recovery_deadline
                                         : o.step_time) = d;
    } else if (flag == "--ticker-threads") {
      if (!integer(1)) return Usage(absl::StrCat("--ticker-threads: expected a count >= 1, got '", v, "'"));
      o.ticker_threads = n;
    } else if (flag == "--streams-per-connection") {
      if (!integer(1)) return Usage(absl::StrCat("--streams-per-connection: expected a count >= 1, got '", v, "'"));
      o.streams_per_connection = n;
    } else if (flag == "--history") {
      if (!integer(100)) return Usage(absl::StrCat("--history: expected a count >= 100, got '", v, "'"));
      o.api_history_limit = static_cast<size_t>(n);
    } else if (flag == "--controller") {
      o.controller_binary = v;
    } else if (flag == "--log-level") {
      o.log_level = v;
    } else if (flag == "--work-dir") {
      o.work_dir = v;
    } else if (flag == "--seed") {
      if (!integer(0)) return Usage(absl::StrCat("--seed: expected a number >= 0, got '", v, "'"));
      o.seed = static_cast<uint64_t>(n);
    } else {
      return Usage(absl::StrCat("unknown flag ", flag));
    }
  }
  if (::access(o.controller_binary.c_str(), X_OK) != 0) {
    return Usage(absl::StrCat("--controller: ", o.controller_binary, " is not an executable"));
  }
  o.progress = [](const std::string& line) { std::fprintf(stderr, "controller-load: %s\n", line.c_str()); };
  auto report = peregrine::loadtest::RunControllerLoad(o);
  if (!report.ok()) {
    std::fprintf(stderr, "controller-load: %s\n", report.status().ToString().c_str());
    return 1;
  }
  std::fputs(peregrine::loadtest::FormatLoadReport(*report).c_str(), stdout);
  return 0;
}
