#include "base/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

constexpr int kLowestPort = 20000;
constexpr int kMaxBlock = 4096;
constexpr int kAttempts = 16;
// Random blocks are tried only when the range below the ephemeral ports leaves this many
// ports beside the block (else nearly every pick would collide with the neighbours').
constexpr int kSpare = 64;

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

absl::StatusOr<int> KernelPickedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot find a free port: socket: ", std::strerror(errno)));
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    return absl::UnavailableError(absl::StrCat("cannot find a free port: bind 127.0.0.1:0: ", std::strerror(err)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace

int EphemeralPortsStart() {
  static const int start = [] {
    std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
    int lo = 0;
    if (in >> lo && lo > 0 && lo <= 65535) return lo;
    return 32768;
  }();
  return start;
}

bool LoopbackPortFree(int port) {
  if (port <= 0 || port > 65535) return false;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as listeners do
  const sockaddr_in addr = Loopback(port);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

absl::StatusOr<int> PickFreePortBlock(int count) {
  if (count < 1 || count > kMaxBlock) {
    return absl::InvalidArgumentError(absl::StrCat("port block of ", count, " ports (expected 1 to ", kMaxBlock, ")"));
  }
  const int top = EphemeralPortsStart();
  if (top >= kLowestPort + kSpare + count) {
    static thread_local std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<int> pick(kLowestPort, top - count);
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      const int first = pick(rng);
      bool free = true;
      for (int p = first; free && p < first + count; ++p) free = LoopbackPortFree(p);
      if (free) return first;
    }
  }
  return KernelPickedPort();
}

}  // namespace peregrine
