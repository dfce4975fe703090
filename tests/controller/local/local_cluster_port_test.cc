// LocalCluster::RendezvousPort: the block of loopback ports a local job's rendezvous,
// stop-time diagnosis and fail-slow validation listen on is free and below the kernel's
// ephemeral range (where outgoing connections of other programs take their ports).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "controller/local/local_cluster.h"

namespace peregrine {
namespace {

// Binds a listener on 127.0.0.1:port (SO_REUSEADDR, as the rendezvous store does); -1 if
// the port is taken.
int Listen(uint32_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 4) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_CASE("LocalCluster rendezvous ports: a free block below the ephemeral range", "[integration]") {
  char tmpl[] = "/tmp/peregrine-port-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};

  LocalClusterOptions options;
  options.state_dir = dir + "/state";
  options.agent_binary = "/nonexistent/peregrine-agent";  // no pod is created here
  auto cluster = LocalCluster::Create(options);
  REQUIRE(cluster.ok());

  uint32_t ephemeral_start = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_start;
  std::set<uint32_t> bases;
  for (int i = 0; i < 16; ++i) {
    absl::StatusOr<uint32_t> base = (*cluster)->RendezvousPort(TrainingJob{});
    REQUIRE(base.ok());
    bases.insert(*base);
    if (ephemeral_start >= 20000 + 128) {
      CHECK(*base >= 20000);
      CHECK(*base + 64 <= ephemeral_start);
    }
    // Every port of the block can really be listened on (the base and the ones diagnosis
    // and validation derive from it).
    for (uint32_t p : {*base, *base + 1, *base + 31, *base + 63}) {
      const int fd = Listen(p);
      CHECK(fd >= 0);
      if (fd >= 0) close(fd);
    }
  }
  CHECK(bases.size() > 1);  // random blocks: concurrent local controllers rarely collide
}

}  // namespace
}  // namespace peregrine
