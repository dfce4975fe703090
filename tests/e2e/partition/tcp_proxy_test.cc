// The test kit's TcpProxy (tests/testing/tcp_proxy.h) over real loopback sockets: it
// forwards both ways; blackholed, the connection stays open while nothing moves and the
// sender's writes back up; healed, every byte written meanwhile arrives in order and the
// connection made during the blackhole is served; destroyed, it leaves no socket behind.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/eventually.h"
#include "tests/testing/tcp_proxy.h"

namespace peregrine::testing {
namespace {

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  const sockaddr_in a = Loopback(port);
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// Reads exactly `n` bytes from `fd` (blocking reads behind poll with a generous limit).
std::string ReadExactly(int fd, size_t n) {
  std::string got;
  char buf[64 * 1024];
  while (got.size() < n) {
    pollfd p{fd, POLLIN, 0};
    REQUIRE(poll(&p, 1, 60'000) == 1);
    const ssize_t r = recv(fd, buf, std::min(sizeof(buf), n - got.size()), MSG_DONTWAIT);
    if (r < 0 && errno == EAGAIN) continue;
    REQUIRE(r > 0);
    got.append(buf, static_cast<size_t>(r));
  }
  return got;
}

// A loopback echo server: one thread per connection, each echoing until EOF.
class EchoServer {
 public:
  EchoServer() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a = Loopback(0);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] {
      while (true) {
        const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;  // shut down
        std::lock_guard<std::mutex> lock(mu_);
        echoes_.emplace_back([c] {
          char buf[16 * 1024];
          ssize_t n;
          while ((n = recv(c, buf, sizeof(buf), 0)) > 0) {
            for (ssize_t off = 0; off < n;) {
              const ssize_t w = send(c, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
              if (w <= 0) break;
              off += w;
            }
          }
          close(c);
        });
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);  // wakes accept()
    accept_thread_.join();
    close(fd_);
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : echoes_) t.join();  // each ends when its peer closed
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::mutex mu_;
  std::vector<std::thread> echoes_;
  std::thread accept_thread_;
};

TEST_CASE("TcpProxy forwards, blackholes with the connection open and writes backed up, heals in order", "[unit]") {
  const int fds_before = OpenFds();
  {
    EchoServer echo;
    TcpProxy proxy(echo.port());
    const int client = Connect(proxy.port());
    REQUIRE(send(client, "hello", 5, MSG_NOSIGNAL) == 5);
    CHECK(ReadExactly(client, 5) == "hello");
    CHECK(proxy.connections_open() == 1);

    proxy.Blackhole();
    CHECK(proxy.blackholed());
    const uint64_t forwarded = proxy.bytes_forwarded();
    // The sender writes until its writes back up: the kernel buffers between it and the
    // proxy fill, and nothing more is taken.
    REQUIRE(fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK) == 0);
    std::string sent;
    std::string chunk(16 * 1024, '\0');
    bool backed_up = false;
    for (int i = 0; i < 4096 && !backed_up; ++i) {  // at most 64 MiB
      for (size_t k = 0; k < chunk.size(); ++k) chunk[k] = static_cast<char>('a' + (sent.size() + k) % 26);
      const ssize_t n = send(client, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n < 0) {
        REQUIRE(errno == EAGAIN);
        backed_up = true;
        break;
      }
      sent.append(chunk.data(), static_cast<size_t>(n));
    }
    CHECK(backed_up);
    CHECK(sent.size() > 0);
    char byte;
    CHECK(recv(client, &byte, 1, MSG_DONTWAIT) == -1);  // nothing came back, no EOF
    CHECK(errno == EAGAIN);
    pollfd p{client, POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 0);  // neither hung up nor reset
    CHECK(proxy.bytes_forwarded() == forwarded);
    CHECK(proxy.connections_open() == 1);
    // A connection made during the blackhole waits in the backlog, not accepted.
    const int late = Connect(proxy.port());
    CHECK(proxy.connections_accepted() == 1);

    proxy.Heal();
    CHECK_FALSE(proxy.blackholed());
    REQUIRE(fcntl(client, F_SETFL, fcntl(client, F_GETFL) & ~O_NONBLOCK) == 0);
    const std::string back = ReadExactly(client, sent.size());
    CHECK(back == sent);
    CHECK(Eventually([&] { return proxy.connections_accepted() == 2; }));
    REQUIRE(send(late, "late", 4, MSG_NOSIGNAL) == 4);
    CHECK(ReadExactly(late, 4) == "late");
    close(client);
    close(late);
    CHECK(Eventually([&] { return proxy.connections_open() == 0; }));
  }
  CHECK(OpenFds() == fds_before);
}

TEST_CASE("TcpProxy closes a connection whose target refuses it, and blackholes with no connection", "[unit]") {
  int dead_port = 0;
  {
    EchoServer gone;  // a port that was just bound and is closed now
    dead_port = gone.port();
  }
  TcpProxy proxy(dead_port);
  const int client = Connect(proxy.port());
  char byte;
  pollfd p{client, POLLIN, 0};
  REQUIRE(poll(&p, 1, 60'000) == 1);
  CHECK(recv(client, &byte, 1, 0) == 0);  // closed by the proxy
  close(client);
  proxy.Blackhole();
  proxy.Heal();
  CHECK(proxy.connections_open() == 0);
}

}  // namespace
}  // namespace peregrine::testing
