#include "diagnosis/tools/nccl_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

constexpr uint32_t kStoreMagic = 0x50524753;

struct Request {
  uint32_t magic;
  uint32_t rank;
  uint32_t world_size;
  uint32_t reserved;
};

using Clock = std::chrono::steady_clock;

absl::StatusOr<sockaddr_storage> Resolve(const std::string& addr, int port, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string host = addr.empty() ? "127.0.0.1" : addr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve MASTER_ADDR '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

// Waits until fd is readable/writable or the deadline; true when ready.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Moves n bytes through `io` (one recv or send of at most the bytes left; <= 0 ends the
// transfer unless interrupted). True when all moved.
template <typename Byte, typename Io>
bool MoveAll(Byte* p, size_t n, Io io) {
  while (n > 0) {
    ssize_t r = io(p, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= r;
  }
  return true;
}

bool ReadAll(int fd, void* buf, size_t n, Clock::time_point deadline) {
  return MoveAll(static_cast<char*>(buf), n, [&](char* p, size_t left) -> ssize_t {
    if (!WaitFor(fd, POLLIN, deadline)) return 0;
    return recv(fd, p, left, 0);
  });
}

bool WriteAll(int fd, const void* buf, size_t n) {
  return MoveAll(static_cast<const char*>(buf), n,
                 [&](const char* p, size_t left) { return send(fd, p, left, MSG_NOSIGNAL); });
}

void Serve(int listen_fd, int world_size, ncclUniqueId id) {
  int served = 0;
  while (served < world_size - 1) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    Request req{};
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    if (ReadAll(fd, &req, sizeof(req), deadline) && req.magic == kStoreMagic &&
        static_cast<int>(req.world_size) == world_size &&
        WriteAll(fd, id.internal, sizeof(id.internal))) {
      ++served;
    }
    close(fd);
  }
  close(listen_fd);
}

}  // namespace

absl::Status ServeUniqueId(const std::string& addr, int port, int world_size,
                           const ncclUniqueId& id, int timeout_ms) {
  socklen_t len = 0;
  absl::StatusOr<sockaddr_storage> sa = Resolve(addr, port, &len);
  if (!sa.ok()) return sa.status();
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<const sockaddr*>(&*sa), len) == 0 && listen(fd, 1024) == 0) {
      if (world_size > 1) {
        std::thread(Serve, fd, world_size, id).detach();
      } else {
        close(fd);
      }
      return absl::OkStatus();
    }
    const int err = errno;
    close(fd);
    if (err != EADDRINUSE || Clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", addr, ":", port, ": ",
                                                 std::strerror(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<ncclUniqueId> FetchUniqueId(const std::string& addr, int port, int rank,
                                           int world_size, int timeout_ms) {
  socklen_t len = 0;
  absl::StatusOr<sockaddr_storage> sa = Resolve(addr, port, &len);
  if (!sa.ok()) return sa.status();
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string last_error = "no attempt";
  while (Clock::now() < deadline) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&*sa), len) == 0) {
      Request req{kStoreMagic, static_cast<uint32_t>(rank), static_cast<uint32_t>(world_size), 0};
      ncclUniqueId id;
      if (WriteAll(fd, &req, sizeof(req)) && ReadAll(fd, id.internal, sizeof(id.internal), deadline)) {
        close(fd);
        return id;
      }
      last_error = "the store closed the connection (WORLD_SIZE mismatch with rank 0?)";
    } else {
      last_error = std::strerror(errno);
    }
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("no ncclUniqueId from rank 0 at ", addr, ":",
                                                  port, " within ", timeout_ms,
                                                  " ms: ", last_error));
}

}  // namespace peregrine
