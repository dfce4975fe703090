#include "tests/testing/tcp_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

namespace peregrine::testing {
namespace {

// Bytes read from one side and not yet written to the other, per direction: reading stops
// while this much is queued, so a stalled peer backs the other one up.
constexpr size_t kBufferCap = 256 * 1024;

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A connected, non-blocking socket to 127.0.0.1:port, or -1.
int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const sockaddr_in a = Loopback(port);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One proxied connection: fd[0] the accepted client, fd[1] the target; buf[i] holds what
// was read from fd[i] for fd[1 - i].
struct Pair {
  std::array<int, 2> fd{-1, -1};
  std::array<std::string, 2> buf;
  bool dead = false;
};

}  // namespace

TcpProxy::TcpProxy(int target_port) : target_port_(target_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(listen_fd_ >= 0);
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = Loopback(0);
  REQUIRE(bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(listen_fd_, 64) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  port_ = ntohs(a.sin_port);
  REQUIRE(pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) == 0);
  thread_ = std::thread([this] { Loop(); });
}

TcpProxy::~TcpProxy() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  const char c = 's';
  (void)!write(wake_fds_[1], &c, 1);
  thread_.join();
  close(listen_fd_);
  close(wake_fds_[0]);
  close(wake_fds_[1]);
}

void TcpProxy::Blackhole() { SetBlackhole(true); }
void TcpProxy::Heal() { SetBlackhole(false); }

bool TcpProxy::blackholed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blackhole_;
}

void TcpProxy::SetBlackhole(bool on) {
  std::unique_lock<std::mutex> lock(mu_);
  blackhole_ = on;
  const uint64_t mine = ++requests_;
  const char c = 'b';
  (void)!write(wake_fds_[1], &c, 1);
  applied_cv_.wait(lock, [&] { return applied_ >= mine || stop_; });
}

// One thread, one poll() over the listener, a wake pipe and every connection. While
// blackholed only the wake pipe is polled: nothing is accepted, read or written, so the
// kernel buffers of both peers fill and their writes block (or return EAGAIN), as behind
// a partition. A request takes effect at the top of an iteration, which is when the
// requester is released: after Blackhole() returns, no byte moves.
void TcpProxy::Loop() {
  std::vector<Pair> pairs;
  while (true) {
    bool blackhole = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
      blackhole = blackhole_;
      applied_ = requests_;
    }
    applied_cv_.notify_all();
    std::vector<pollfd> fds = {{wake_fds_[0], POLLIN, 0}};
    if (!blackhole) {
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Pair& p : pairs) {
        for (int i = 0; i < 2; ++i) {
          short events = 0;
          if (p.buf[i].size() < kBufferCap) events |= POLLIN;
          if (!p.buf[1 - i].empty()) events |= POLLOUT;
          fds.push_back({p.fd[i], events, 0});
        }
      }
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents != 0) {
      char drain[64];
      while (read(wake_fds_[0], drain, sizeof(drain)) > 0) {
      }
    }
    if (blackhole) continue;
    for (size_t k = 0; k < pairs.size(); ++k) {
      Pair& p = pairs[k];
      for (int i = 0; i < 2 && !p.dead; ++i) {
        const short rev = fds[2 + 2 * k + i].revents;
        if (rev & POLLOUT) {
          std::string& out = p.buf[1 - i];
          const ssize_t n = send(p.fd[i], out.data(), out.size(), MSG_NOSIGNAL);
          if (n > 0) {
            out.erase(0, static_cast<size_t>(n));
            forwarded_ += static_cast<uint64_t>(n);
          } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            p.dead = true;
          }
        }
        if (!p.dead && (rev & (POLLIN | POLLHUP | POLLERR))) {
          char chunk[64 * 1024];
          const size_t room = kBufferCap - std::min(kBufferCap, p.buf[i].size());
          const ssize_t n = recv(p.fd[i], chunk, std::min(room, sizeof(chunk)), 0);
          if (n > 0) {
            p.buf[i].append(chunk, static_cast<size_t>(n));
          } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            p.dead = true;  // one side closed: close both (no half-close is proxied)
          }
        }
      }
    }
    for (Pair& p : pairs) {
      if (!p.dead) continue;
      close(p.fd[0]);
      close(p.fd[1]);
      --open_;
    }
    std::erase_if(pairs, [](const Pair& p) { return p.dead; });
    if (fds[1].revents & POLLIN) {
      while (true) {
        const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (client < 0) break;
        ++accepted_;
        const int target = ConnectTo(target_port_);
        if (target < 0) {
          close(client);
          continue;
        }
        Pair p;
        p.fd = {client, target};
        pairs.push_back(std::move(p));
        ++open_;
      }
    }
  }
  for (Pair& p : pairs) {
    close(p.fd[0]);
    close(p.fd[1]);
    --open_;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    applied_ = requests_;
  }
  applied_cv_.notify_all();
}

}  // namespace peregrine::testing
