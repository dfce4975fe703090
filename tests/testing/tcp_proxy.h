// TcpProxy: a loopback TCP forwarder for partition tests. It listens on 127.0.0.1 (a port
// the kernel picks) and forwards every accepted connection to 127.0.0.1:<target>, both
// directions. Blackhole() cuts the link the way a network partition does: the connections
// stay open (no FIN, no RST) but the proxy stops reading and forwarding in both
// directions and accepts no new connection (they wait in the listen backlog), so the
// peers' writes back up once the kernel buffers are full. Heal() resumes forwarding; what
// was written meanwhile is delivered in order.
//
// Ownership: the proxy owns its sockets and its one thread; the destructor closes every
// socket and joins the thread. Blackhole(), Heal() and the counters may be called from any
// thread; Blackhole() and Heal() return once the forwarding thread has applied them.
// Errors: a socket that cannot be set up fails the calling test (Catch2 REQUIRE); a
// connection whose target refuses it is closed.
#ifndef PEREGRINE_TESTS_TESTING_TCP_PROXY_H_
#define PEREGRINE_TESTS_TESTING_TCP_PROXY_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace peregrine::testing {

class TcpProxy {
 public:
  explicit TcpProxy(int target_port);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  void Blackhole();
  void Heal();
  bool blackholed() const;

  int connections_accepted() const { return accepted_.load(); }
  int connections_open() const { return open_.load(); }
  uint64_t bytes_forwarded() const { return forwarded_.load(); }

 private:
  void Loop();
  void SetBlackhole(bool on);

  int target_port_ = 0;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};
  mutable std::mutex mu_;
  std::condition_variable applied_cv_;
  bool blackhole_ = false;     // requested (guarded by mu_)
  uint64_t requests_ = 0;      // SetBlackhole calls (guarded by mu_)
  uint64_t applied_ = 0;       // requests the loop has applied (guarded by mu_)
  bool stop_ = false;          // guarded by mu_
  std::atomic<int> accepted_{0};
  std::atomic<int> open_{0};
  std::atomic<uint64_t> forwarded_{0};
  std::thread thread_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_TCP_PROXY_H_
