// nccl-hook-bench: the cost libperegrine_nccl.so adds to an NCCL call.
//
// The same loop of ncclAllReduce calls runs in child processes of this one run, straight
// to the library and through the hook (LD_PRELOAD), alternating, several rounds each; the
// best round of each configuration (thread CPU ns per call, so time descheduled on a
// shared machine does not count) is reported with the added ns per call and the ratio.
//   --lib sim   (default when built) sim's libnccl.so.2, 1-rank communicator, count 1
//   --lib real  the CUDA toolkit's libnccl.so.2 with a null communicator: NCCL rejects
//               the call after its argument checks, so it times the hook around a
//               near-empty call on a machine without a GPU
//   --calls N   calls per round (default 2,000,000)   --rounds R (default 5)
// Configurations: direct; hooked (recording only, what runs all the time); hooked with
// host-timing profiling (PEREGRINE_NCCL_PROFILING=1, CUDA events off: a second, exit record
// per call). CUDA-event profiling (cudaEventRecord around each call, resolved off the hot
// path) needs libcudart and a GPU with a real communicator; it is not measured here.
//
// Syscall check (when strace is on PATH): each configuration's child runs under
// `strace -f -c` twice, with --strace-calls-short and --strace-calls-long calls (defaults
// 1,000 and 101,000); the difference in the total syscall count is what the extra 110,000
// loop iterations (each run adds a 10% warm-up) cost, so set-up (ring creation, library
// loading) cancels out (minimum of 3 runs of each length, as set-up varies by a few
// futex calls). The budget passes when the hook adds less than one syscall per 1,000 calls
// (a syscall per call would add 110,000).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "nccl.h"

extern char** environ;

namespace {

int Child(const std::string& lib, long calls) {
  ncclComm_t comm = nullptr;
  if (lib == "sim") {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return 3;
    if (ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) return 4;
  }
  float send = 1.0f, recv = 0.0f;
  const ncclResult_t want = lib == "sim" ? ncclSuccess : ncclInvalidArgument;
  for (long i = 0; i < calls / 10; ++i) {  // warm-up
    if (ncclAllReduce(&send, &recv, 1, ncclFloat32, ncclSum, comm, nullptr) != want) return 5;
  }
  // Thread CPU time: on a shared machine, time spent descheduled is not the hook's.
  timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  for (long i = 0; i < calls; ++i) {
    if (ncclAllReduce(&send, &recv, 1, ncclFloat32, ncclSum, comm, nullptr) != want) return 5;
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  const double ns = ((c1.tv_sec - c0.tv_sec) * 1e9 + (c1.tv_nsec - c0.tv_nsec)) / calls;
  if (comm != nullptr) ncclCommDestroy(comm);
  std::printf("%.3f\n", ns);
  return 0;
}

// Runs this binary as a child; returns its ns/call or a negative value on failure.
double RunChild(const std::string& self, const std::string& lib, long calls,
                const std::map<std::string, std::string>& env, const std::string& out) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (env.count(key) == 0 && key != "LD_PRELOAD") env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string calls_text = std::to_string(calls);
  std::string lib_copy = lib, self_copy = self, flag = "--child";
  char* argv[] = {self_copy.data(), flag.data(), lib_copy.data(), calls_text.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, self.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -WEXITSTATUS(status) - 1;
  FILE* f = std::fopen(out.c_str(), "r");
  double ns = -1;
  if (f != nullptr) {
    if (std::fscanf(f, "%lf", &ns) != 1) ns = -1;
    std::fclose(f);
  }
  return ns;
}


std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The environment without LD_PRELOAD and without the keys of `env`.
std::vector<std::string> BaseEnvironment(const std::map<std::string, std::string>& env) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (env.count(key) == 0 && key != "LD_PRELOAD") env_strings.push_back(kv);
  }
  return env_strings;
}

// The first executable `name` on PATH, or "".
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string rest = path == nullptr ? "" : path;
  while (!rest.empty()) {
    const size_t colon = rest.find(':');
    const std::string dir = rest.substr(0, colon);
    rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    const std::string candidate = dir + "/" + name;
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs the child under `strace -f -c` with `env` given to the child only (-E); returns
// the syscall counts by name (key "total" for the sum), or an empty map on failure.
std::map<std::string, long> StraceCounts(const std::string& strace, const std::string& self,
                                         const std::string& lib, long calls,
                                         const std::map<std::string, std::string>& env,
                                         const std::string& dir) {
  const std::string stats = dir + "/strace.txt";
  std::vector<std::string> args = {strace, "-f", "-c", "-o", stats};
  for (const auto& [k, v] : env) {
    args.push_back("-E");
    args.push_back(k + "=" + v);
  }
  for (const char* a : {"--", self.c_str(), "--child", lib.c_str()}) args.push_back(a);
  args.push_back(std::to_string(calls));
  std::vector<std::string> env_strings = BaseEnvironment(env);
  std::vector<char*> argv = Pointers(args);
  std::vector<char*> envp = Pointers(env_strings);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, strace.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  std::map<std::string, long> counts;
  if (rc != 0) return counts;
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return counts;
  // Lines: "% time  seconds  usecs/call  calls  [errors]  syscall"; the last is "total".
  FILE* f = std::fopen(stats.c_str(), "r");
  if (f == nullptr) return counts;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    double pct = 0, secs = 0;
    long usecs = 0, n = 0;
    char rest[256];
    if (std::sscanf(line, "%lf %lf %ld %ld %255[^\n]", &pct, &secs, &usecs, &n, rest) != 5) {
      continue;
    }
    std::string name = rest;
    const size_t last_space = name.find_last_of(' ');
    if (last_space != std::string::npos) name = name.substr(last_space + 1);
    counts[name] = n;
  }
  std::fclose(f);
  std::filesystem::remove(stats);
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return Child(argv[2], std::atol(argv[3]));
  const std::string bin = PEREGRINE_BINARY_DIR;
  std::string lib = std::filesystem::exists(bin + "/lib/sim/libnccl.so.2") ? "sim" : "real";
  long calls = 2000000;
  int rounds = 5;
  long strace_short = 1000, strace_long = 101000;
  bool usage = false;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      usage = true;
    } else if (std::strcmp(argv[i], "--lib") == 0) {
      lib = argv[i + 1];
    } else if (std::strcmp(argv[i], "--calls") == 0) {
      calls = std::atol(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      rounds = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--strace-calls-short") == 0) {
      strace_short = std::atol(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--strace-calls-long") == 0) {
      strace_long = std::atol(argv[i + 1]);
    } else {
      usage = true;
    }
  }
  if (usage || (lib != "sim" && lib != "real") || calls <= 0 || rounds <= 0 ||
      strace_short <= 0 || strace_long <= strace_short) {
    std::fprintf(stderr,
                 "usage: %s [--lib sim|real] [--calls N] [--rounds R] "
                 "[--strace-calls-short N] [--strace-calls-long M > N]\n",
                 argv[0]);
    return 2;
  }
  const std::string lib_dir = lib == "sim" ? bin + "/lib/sim" : "/usr/local/cuda/lib64";
  const std::string hook = bin + "/lib/libperegrine_nccl.so";
  char tmpl[] = "/dev/shm/nccl-hook-bench-XXXXXX";
  char* dir = mkdtemp(tmpl);
  if (dir == nullptr) return 1;
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();
  const std::string out = std::string(dir) + "/out";
  struct Config {
    const char* name;
    std::map<std::string, std::string> env;
    double best = 1e300;
  };
  std::vector<Config> configs = {
      {"direct", {{"LD_LIBRARY_PATH", lib_dir}}},
      {"hooked", {{"LD_LIBRARY_PATH", lib_dir}, {"LD_PRELOAD", hook},
                  {"PEREGRINE_NCCL_RING_DIR", dir}}},
      {"hooked+host-prof", {{"LD_LIBRARY_PATH", lib_dir}, {"LD_PRELOAD", hook},
                            {"PEREGRINE_NCCL_RING_DIR", dir},
                            {"PEREGRINE_NCCL_PROFILING", "1"},
                            {"PEREGRINE_NCCL_CUDA_EVENTS", "0"}}},
  };
  int failures = 0;
  for (int r = 0; r < rounds; ++r) {
    for (Config& c : configs) {
      const double ns = RunChild(self, lib, calls, c.env, out);
      if (ns < 0) {
        std::fprintf(stderr, "%s round %d failed (%g)\n", c.name, r, ns);
        ++failures;
        continue;
      }
      c.best = std::min(c.best, ns);
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().filename() != "out") std::filesystem::remove(e.path());
      }
    }
  }
  // Syscalls made by the loop itself, per configuration (see the header comment).
  const std::string strace = FindOnPath("strace");
  std::vector<long> loop_syscalls(configs.size(), -1);
  std::vector<std::string> added_names(configs.size());
  if (!strace.empty()) {
    for (size_t c = 0; c < configs.size(); ++c) {
      // Set-up varies by a few syscalls from run to run (futex wake-ups of the hook's
      // start-up); the minimum of 3 runs of each length cancels that.
      std::map<std::string, long> short_run, long_run;
      for (int rep = 0; rep < 3; ++rep) {
        for (auto [n, into] : {std::pair{strace_short, &short_run}, std::pair{strace_long, &long_run}}) {
          const auto counts = StraceCounts(strace, self, lib, n, configs[c].env, dir);
          for (const auto& [name, k] : counts) {
            auto it = into->find(name);
            if (rep == 0 || it == into->end()) {
              (*into)[name] = rep == 0 ? k : 0;
            } else {
              it->second = std::min(it->second, k);
            }
          }
          if (counts.count("total") == 0) into->erase("total");
          for (const auto& e : std::filesystem::directory_iterator(dir)) {
            if (e.path().filename() != "out") std::filesystem::remove(e.path());
          }
        }
      }
      if (short_run.count("total") == 0 || long_run.count("total") == 0) {
        std::fprintf(stderr, "%s: strace run failed\n", configs[c].name);
        ++failures;
        continue;
      }
      loop_syscalls[c] = long_run.at("total") - short_run.at("total");
      for (const auto& [name, n] : long_run) {
        const auto it = short_run.find(name);
        const long d = n - (it == short_run.end() ? 0 : it->second);
        if (name != "total" && d > 0) added_names[c] += " " + name + "=" + std::to_string(d);
      }
    }
  }
  std::filesystem::remove_all(dir);
  if (failures > 0) return 1;
  std::printf("nccl-hook-bench: ncclAllReduce(count=1) on %s, %ld calls x %d rounds (best round, thread CPU time)\n",
              lib == "sim" ? "sim libnccl.so.2, 1-rank communicator"
                           : "real libnccl.so.2, null communicator (rejected by NCCL)",
              calls, rounds);
  const double base = configs[0].best;
  for (const Config& c : configs) {
    std::printf("  %-18s %9.1f ns/call   added %+8.1f ns   ratio %.3f\n", c.name, c.best,
                c.best - base, c.best / base);
  }
  const double added = configs[1].best - base;
  std::printf("  budget < 100 ns added per call (hooked, profiling off): %s (%+.1f ns, ratio %.3f)\n",
              added < 100.0 ? "PASS" : "FAIL", added, configs[1].best / base);
  std::printf("  CUDA-event profiling: needs libcudart and a GPU with a real communicator; not "
              "measured by this run\n");
  if (strace.empty()) {
    std::printf("  syscall check: strace not on PATH, skipped\n");
    return 0;
  }
  const long loop_calls = (strace_long - strace_short) * 11 / 10;
  std::printf("  syscalls made by %ld loop iterations (strace -f -c, %ld-call run minus %ld-call run):\n",
              loop_calls, strace_long, strace_short);
  for (size_t c = 0; c < configs.size(); ++c) {
    std::printf("    %-18s %ld%s\n", configs[c].name, loop_syscalls[c],
                added_names[c].empty() ? "" : ("  (" + added_names[c].substr(1) + ")").c_str());
  }
  // One syscall per call would add loop_calls; the set-up noise left is a few.
  const long added_syscalls = loop_syscalls[1] - loop_syscalls[0];
  std::printf("  budget no syscalls on the hot path (hooked vs direct): %s (%+ld syscalls over "
              "%ld calls, %.6f per call)\n",
              added_syscalls * 1000 < loop_calls ? "PASS" : "FAIL", added_syscalls, loop_calls,
              static_cast<double>(added_syscalls) / static_cast<double>(loop_calls));
  return 0;
}
