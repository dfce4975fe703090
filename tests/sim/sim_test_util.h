// Helpers shared by the sim suite: paths of the binaries under test, unique ids for
// worker processes, temporary directories and free loopback ports.
#ifndef PEREGRINE_TESTS_SIM_SIM_TEST_UTIL_H_
#define PEREGRINE_TESTS_SIM_SIM_TEST_UTIL_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "tests/sim/child_process.h"

namespace peregrine::testing {

inline constexpr auto kGenerous = std::chrono::seconds(120);

inline std::string WorkerPath() { return std::string(PEREGRINE_BINARY_DIR) + "/bin/sim_nccl_worker"; }
inline std::string TrainerPath() { return std::string(PEREGRINE_BINARY_DIR) + "/bin/sim-trainer"; }

// A fresh ncclUniqueId (the bootstrap root runs in this test process), hex encoded.
inline std::string NewIdHex() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "";
  std::string hex;
  char buf[3];
  for (char c : id.internal) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
    hex += buf;
  }
  return hex;
}

// A directory removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "peregrine-sim-XXXXXX").string();
    path_ = mkdtemp(templ.data()) != nullptr ? templ : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A loopback port that was free a moment ago (bound to 0, then released).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_SIM_SIM_TEST_UTIL_H_
