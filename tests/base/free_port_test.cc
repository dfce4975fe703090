#include "base/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

// A listener on 127.0.0.1:port, closed on destruction; fd < 0 when it could not bind.
struct Listener {
  explicit Listener(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
};

TEST_CASE("PickFreePort gives a loopback port a listener can bind, below the ephemeral range", "[unit]") {
  const int top = EphemeralPortsStart();
  CHECK(top > 0);
  CHECK(top <= 65535);
  // Ports are only free when checked, so another process may take one: try a few.
  bool bound = false;
  for (int attempt = 0; attempt < 5 && !bound; ++attempt) {
    absl::StatusOr<int> port = PickFreePort();
    REQUIRE(port.ok());
    CHECK(*port > 0);
    CHECK(*port <= 65535);
    if (top >= 20000 + 65) {
      CHECK(*port >= 20000);
      CHECK(*port < top);
    }
    Listener l(*port);
    bound = l.fd >= 0;
  }
  CHECK(bound);
}

TEST_CASE("a port with a listener is not free, once closed it is", "[unit]") {
  // Ports are only free when checked, so another process may take one first: try a few.
  bool checked = false;
  for (int attempt = 0; attempt < 5 && !checked; ++attempt) {
    absl::StatusOr<int> port = PickFreePort();
    REQUIRE(port.ok());
    {
      Listener l(*port);
      if (l.fd < 0) continue;
      CHECK_FALSE(LoopbackPortFree(*port));
    }
    CHECK(LoopbackPortFree(*port));
    checked = true;
  }
  CHECK(checked);
  CHECK_FALSE(LoopbackPortFree(0));
  CHECK_FALSE(LoopbackPortFree(70000));
}

TEST_CASE("PickFreePortBlock gives the first of consecutive free ports", "[unit]") {
  absl::StatusOr<int> first = PickFreePortBlock(64);
  REQUIRE(first.ok());
  if (EphemeralPortsStart() >= 20000 + 64 + 64) {
    CHECK(*first >= 20000);
    CHECK(*first + 64 <= EphemeralPortsStart());
  }
  CHECK(*first + 63 <= 65535);
}

TEST_CASE("PickFreePortBlock refuses a block size out of range, naming it", "[unit]") {
  for (int count : {0, -1, 4097}) {
    absl::StatusOr<int> first = PickFreePortBlock(count);
    REQUIRE_FALSE(first.ok());
    CHECK(first.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(first.status().message().find(std::to_string(count)) != absl::string_view::npos);
  }
}

}  // namespace
}  // namespace peregrine
