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

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) return Child(argv[2], std::atol(argv[3]));
  const std::string bin = PEREGRINE_BINARY_DIR;
  std::string lib = std::filesystem::exists(bin + "/lib/sim/libnccl.so.2") ? "sim" : "real";
  long calls = 2000000;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--lib") == 0) lib = argv[i + 1];
    if (std::strcmp(argv[i], "--calls") == 0) calls = std::atol(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  if ((lib != "sim" && lib != "real") || calls <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: %s [--lib sim|real] [--calls N] [--rounds R]\n", argv[0]);
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
      {"hooked+profiling", {{"LD_LIBRARY_PATH", lib_dir}, {"LD_PRELOAD", hook},
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
  std::printf("  budget: < 100 ns added per call (hooked, profiling off)\n");
  return 0;
}
