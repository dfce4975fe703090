// The HTTP server's limits over real loopback sockets: request bodies above the bound are
// refused with 413 (declared by Content-Length or sent chunked) and the server keeps
// serving; /healthz answers while a thousand stalled clients hold connections open.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <httplib.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/controller_metrics.h"
#include "controller/http_server.h"
#include "tests/testing/eventually.h"

namespace peregrine {
namespace {

// A connected loopback TCP socket, closed on destruction.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{60, 0};  // a broken server fails the test instead of hanging it
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until the response headers and a JSON body arrived, or the peer closed.
  std::string ReadResponse() {
    std::string out;
    char buf[4096];
    while (true) {
      const size_t end = out.find("\r\n\r\n");
      if (end != std::string::npos && out.find("}", end) != std::string::npos) return out;
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

bool HealthzAnswers(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(30, 0);
  client.set_read_timeout(30, 0);
  httplib::Result r = client.Get("/healthz");
  return r && r->status == 200 && r->body == "ok\n";
}

struct Server {
  ControllerMetrics metrics;
  HttpServer http{std::vector<JobController*>{}, &metrics, nullptr};
  int port = 0;
  explicit Server(const HttpLimits& limits = HttpLimits{}) {
    http.SetLimits(limits);
    absl::StatusOr<int> bound = http.Start("127.0.0.1", 0);
    REQUIRE(bound.ok());
    port = *bound;
  }
};

TEST_CASE("A request body of 1 MiB + 1 byte is refused with 413 and the server keeps serving", "[integration]") {
  Server s;
  httplib::Client client("127.0.0.1", s.port);
  client.set_read_timeout(60, 0);
  client.set_write_timeout(60, 0);
  const std::string path = "/api/v1/jobs/default/j/code";
  httplib::Result r = client.Post(path.c_str(), std::string((1 << 20) + 1, 'x'), "application/json");
  REQUIRE(r);
  CHECK(r->status == 413);
  CHECK(absl::StrContains(r->body, "request body too large: at most 1048576 bytes"));
  // The same connection and new ones go on: a body at the bound is read (and judged).
  r = client.Post(path.c_str(), std::string(1 << 20, ' '), "application/json");
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK(HealthzAnswers(s.port));
}

TEST_CASE("A chunked request body over 1 MiB is refused with 413 without being kept", "[integration]") {
  Server s;
  RawClient c(s.port);
  REQUIRE(c.connected());
  REQUIRE(c.Send("POST /api/v1/jobs/default/j/faults HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  const std::string chunk(64 * 1024, 'y');
  for (int i = 0; i < 32; ++i) REQUIRE(c.Send(absl::StrCat("10000\r\n", chunk, "\r\n")));  // 2 MiB
  REQUIRE(c.Send("0\r\n\r\n"));
  const std::string response = c.ReadResponse();
  CHECK(absl::StartsWith(response, "HTTP/1.1 413"));
  CHECK(absl::StrContains(response, "request body too large"));
  CHECK(HealthzAnswers(s.port));
}

TEST_CASE("A body sent to a route that takes none is answered without being read", "[integration]") {
  Server s;
  RawClient c(s.port);
  REQUIRE(c.connected());
  REQUIRE(c.Send("PUT /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n"));
  const std::string response = c.ReadResponse();
  CHECK(absl::StartsWith(response, "HTTP/1.1 404"));
  CHECK(HealthzAnswers(s.port));
}

TEST_CASE("/healthz answers while 1000 stalled clients hold connections open", "[integration]") {
  constexpr int kSlowClients = 1000;
  // Both ends of every connection live in this process.
  rlimit files{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &files) == 0);
  const rlim_t want = 2 * kSlowClients + 256;
  if (files.rlim_cur < want) {
    files.rlim_cur = files.rlim_max == RLIM_INFINITY ? want : std::min<rlim_t>(want, files.rlim_max);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &files) == 0);
  }
  REQUIRE(files.rlim_cur >= want);
  // Each stalled client holds a worker until the read timeout drops it, so /healthz waits
  // behind about kSlowClients / max_connections of them: one second each keeps the test
  // short (with the default five, about 2.5 minutes); what is tested is the same.
  HttpLimits limits;
  limits.read_timeout_seconds = 1;
  Server s(limits);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < kSlowClients; ++i) {
    slow.push_back(std::make_unique<RawClient>(s.port));
    REQUIRE(slow.back()->connected());
    REQUIRE(slow.back()->Send("GET /healthz HTTP/1.1\r\nHost: x\r\n"));  // and never the blank line
  }
  CHECK(testing::Eventually([&] { return HealthzAnswers(s.port); }, absl::Seconds(120)));
  slow.clear();
}

TEST_CASE("HTTP limits must be positive", "[unit]") {
  HttpLimits limits;
  CHECK(ValidateHttpLimits(limits).ok());
  limits.max_connections = 0;
  absl::Status s = ValidateHttpLimits(limits);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(s.message(), "max_connections"));
}

}  // namespace
}  // namespace peregrine
