// The REST client's connections to the API server have TCP_NODELAY set: the client writes
// a request's headers and its body separately, and with Nagle's algorithm on the body
// waits for the server's delayed ACK. Read back from the client's own sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "controller/kube/rest_client.h"

#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
#include "tests/fakes/fake_kube_api_server.h"

namespace peregrine {
namespace {

// This process's TCP sockets connected to 127.0.0.1:`port` (the client ends: the
// server's accepted sockets have the client's ephemeral port as their peer).
std::vector<int> SocketsConnectedTo(int port) {
  std::vector<int> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET) continue;
    if (ntohs(peer.sin_port) == port && peer.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) out.push_back(fd);
  }
  return out;
}

int PortOf(const std::string& base_url) {
  int port = 0;
  const std::string tail = base_url.substr(base_url.rfind(':') + 1);
  REQUIRE(absl::SimpleAtoi(tail, &port));
  return port;
}

TEST_CASE("rest client: connections to the API server have TCP_NODELAY set", "[integration]") {
  testing::FakeKubeApiServer server;
  REQUIRE(server.Start().ok());
  kube::Config config;
  config.server = server.base_url();
  config.source = "test";
  auto client = kube::RestClient::Create(config);
  REQUIRE(client.ok());
  const kube::ResourcePath pods{.group = "", .version = "v1", .plural = "pods", .namespace_name = "ns"};
  const nlohmann::json pod = {{"apiVersion", "v1"},
                              {"kind", "Pod"},
                              {"metadata", {{"name", "p0"}, {"namespace", "ns"}}},
                              {"spec", {{"containers", nlohmann::json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
  // A request with a body (headers and body written separately) and one without.
  REQUIRE((*client)->Create(pods, pod).ok());
  REQUIRE((*client)->Get(pods, "p0").ok());
  // The idle keep-alive connection stays open in the client's pool.
  const std::vector<int> fds = SocketsConnectedTo(PortOf(server.base_url()));
  REQUIRE_FALSE(fds.empty());
  for (int fd : fds) {
    INFO("fd " << fd);
    int on = 0;
    socklen_t len = sizeof(on);
    REQUIRE(::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len) == 0);
    CHECK(on != 0);
  }
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
