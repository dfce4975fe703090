#include "sim/nccl/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

namespace peregrine::simnccl {
namespace {

std::string ErrnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

timespec ToTimespec(int64_t ns) {
  timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  return ts;
}

// Waits for `events` on fd until the deadline. Returns >0 ready, 0 timeout, <0 error.
int WaitFd(int fd, short events, int64_t deadline_ns) {
  for (;;) {
    pollfd p{fd, events, 0};
    timespec ts;
    timespec* tsp = nullptr;
    if (deadline_ns >= 0) {
      const int64_t left = deadline_ns - NowNs();
      if (left <= 0) return 0;
      ts = ToTimespec(left);
      tsp = &ts;
    }
    int r = ppoll(&p, 1, tsp, nullptr);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

// Smallest chunk a paced send waits for, so that a slow link wakes the thread at most
// about a thousand times a second.
size_t PacingQuantum(double bytes_per_s) {
  return std::max<size_t>(1024, static_cast<size_t>(bytes_per_s / 1000.0));
}

}  // namespace

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int64_t DeadlineAfterMs(int64_t timeout_ms) {
  if (timeout_ms <= 0) return -1;
  return NowNs() + timeout_ms * 1000000;
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

namespace {

// A TCP socket, and *addr set to 127.0.0.1:port; -1 with *error set when there is no socket.
int LoopbackSocket(uint16_t port, sockaddr_in* addr, std::string* error) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = ErrnoText("socket");
    return -1;
  }
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr->sin_port = htons(port);
  return fd;
}

}  // namespace

int ListenLoopback(int backlog, uint16_t* port, std::string* error) {
  sockaddr_in addr;
  int fd = LoopbackSocket(0, &addr, error);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, std::max(backlog, 16)) != 0) {
    *error = ErrnoText("bind/listen on 127.0.0.1");
    close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *error = ErrnoText("getsockname");
    close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

int ConnectLoopback(uint16_t port, std::string* error) {
  sockaddr_in addr;
  int fd = LoopbackSocket(port, &addr, error);
  if (fd < 0) return -1;
  for (;;) {
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    if (errno == EINTR) continue;
    *error = ErrnoText(("connect to 127.0.0.1:" + std::to_string(port)).c_str());
    close(fd);
    return -1;
  }
  SetNoDelay(fd);
  return fd;
}

int AcceptBefore(int listen_fd, int64_t deadline_ns, std::string* error) {
  for (;;) {
    int r = WaitFd(listen_fd, POLLIN, deadline_ns);
    if (r == 0) {
      *error = "timed out waiting for peers to connect";
      return -1;
    }
    if (r < 0) {
      *error = ErrnoText("poll on listening socket");
      return -1;
    }
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      SetNoDelay(fd);
      return fd;
    }
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    *error = ErrnoText("accept");
    return -1;
  }
}

namespace {

// Sends (`sending`) or receives all `bytes` at p before deadline_ns through `io`, one
// non-blocking send or recv of what is left, waiting for the socket when it would block.
// False with *code and *error set on a timeout, a closed connection or an error.
template <typename Byte, typename Io>
bool MoveFully(int fd, Byte* p, size_t bytes, bool sending, int64_t deadline_ns, ncclResult_t* code,
               std::string* error, Io io) {
  while (bytes > 0) {
    ssize_t n = io(p, bytes);
    if (n > 0) {
      p += n;
      bytes -= n;
      continue;
    }
    if (n == 0 && !sending) {
      *code = ncclRemoteError;
      *error = "peer closed the connection";
      return false;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      int r = WaitFd(fd, sending ? POLLOUT : POLLIN, deadline_ns);
      if (r == 0) {
        *code = ncclSystemError;
        *error = sending ? "timed out sending to a peer" : "timed out receiving from a peer";
        return false;
      }
      continue;
    }
    *code = (errno == ECONNRESET || (sending && errno == EPIPE)) ? ncclRemoteError : ncclSystemError;
    *error = ErrnoText(sending ? "send" : "recv");
    return false;
  }
  return true;
}

}  // namespace

bool WriteFully(int fd, const void* data, size_t bytes, int64_t deadline_ns,
                ncclResult_t* code, std::string* error) {
  return MoveFully(fd, static_cast<const char*>(data), bytes, /*sending=*/true, deadline_ns, code, error,
                   [fd](const char* p, size_t n) { return send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT); });
}

bool ReadFully(int fd, void* data, size_t bytes, int64_t deadline_ns, ncclResult_t* code,
               std::string* error) {
  return MoveFully(fd, static_cast<char*>(data), bytes, /*sending=*/false, deadline_ns, code, error,
                   [fd](char* p, size_t n) { return recv(fd, p, n, MSG_DONTWAIT); });
}

namespace {

// The pieces of a message (header, then payload) from t.done up to `limit` bytes of it:
// iov[0] and, while the header is not done and payload is due, iov[1]. Returns how many.
int NextIov(Transfer& t, size_t limit, iovec iov[2]) {
  if (t.done >= sizeof(MessageHeader)) {
    iov[0] = {static_cast<char*>(t.data) + (t.done - sizeof(MessageHeader)), limit - t.done};
    return 1;
  }
  iov[0] = {reinterpret_cast<char*>(&t.header) + t.done, sizeof(MessageHeader) - t.done};
  if (limit <= sizeof(MessageHeader)) return 1;
  iov[1] = {t.data, limit - sizeof(MessageHeader)};
  return 2;
}

// When a paced send (a link with a bandwidth cap) may move its next quantum of payload.
int64_t NextPacedSendNs(const Transfer& t) {
  const size_t payload_done = t.done - sizeof(MessageHeader);
  const size_t want = payload_done + std::min(t.bytes - payload_done, PacingQuantum(t.link.bandwidth_bytes_per_s));
  return t.ready_ns +
         static_cast<int64_t>(std::ceil(static_cast<double>(want) / t.link.bandwidth_bytes_per_s * 1e9));
}

// Moves as many bytes of a send as the socket and the pacing allow. Returns false on error.
bool ProgressSend(Transfer& t, int64_t now, int64_t* wake_ns, ncclResult_t* code,
                  std::string* error) {
  const size_t total = sizeof(MessageHeader) + t.bytes;
  size_t limit = total;
  if (t.link.bandwidth_bytes_per_s > 0 && t.bytes > 0) {
    const double elapsed_s = static_cast<double>(now - t.ready_ns) * 1e-9;
    const double allowed_payload = elapsed_s * t.link.bandwidth_bytes_per_s;
    limit = sizeof(MessageHeader) +
            std::min(t.bytes, static_cast<size_t>(std::max(0.0, allowed_payload)));
    if (limit <= t.done) {
      *wake_ns = NextPacedSendNs(t);
      return true;
    }
  }
  while (t.done < limit) {
    iovec iov[2];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = NextIov(t, limit, iov);
    ssize_t n = sendmsg(t.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      t.done += n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    *code = (errno == EPIPE || errno == ECONNRESET) ? ncclRemoteError : ncclSystemError;
    *error = "send to peer rank " + std::to_string(t.peer) + " failed: " + std::strerror(errno) +
             (*code == ncclRemoteError ? " (peer process gone?)" : "");
    return false;
  }
  if (limit < total) *wake_ns = NextPacedSendNs(t);
  return true;
}

bool ProgressRecv(Transfer& t, ncclResult_t* code, std::string* error) {
  const size_t total = sizeof(MessageHeader) + t.bytes;
  while (t.done < total) {
    iovec iov[2];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = NextIov(t, total, iov);
    ssize_t n = recvmsg(t.fd, &msg, MSG_DONTWAIT);
    if (n > 0) {
      const bool had_header = t.done >= sizeof(MessageHeader);
      t.done += n;
      if (!had_header && t.done >= sizeof(MessageHeader)) {
        if (t.header.magic != kMessageMagic) {
          *code = ncclInvalidUsage;
          *error = "garbled message from peer rank " + std::to_string(t.peer);
          return false;
        }
        if (t.header.tag != t.tag || t.header.bytes != t.bytes) {
          *code = ncclInvalidUsage;
          *error = "mismatched operation with peer rank " + std::to_string(t.peer) + ": expected " +
                   std::to_string(t.bytes) + " bytes (tag " + std::to_string(t.tag) + "), peer sent " +
                   std::to_string(t.header.bytes) + " bytes (tag " + std::to_string(t.header.tag) +
                   ")";
          return false;
        }
      }
      continue;
    }
    if (n == 0) {
      *code = ncclRemoteError;
      *error = "peer rank " + std::to_string(t.peer) +
               " closed the connection (process died or aborted its communicator)";
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    if (errno == EINTR) continue;
    *code = errno == ECONNRESET ? ncclRemoteError : ncclSystemError;
    *error = "receive from peer rank " + std::to_string(t.peer) + " failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

bool Complete(const Transfer& t) { return t.done >= sizeof(MessageHeader) + t.bytes; }

}  // namespace

ncclResult_t RunTransfers(std::vector<Transfer>& transfers, int64_t deadline_ns,
                          std::string* error) {
  const int64_t start = NowNs();
  std::vector<std::vector<char>> corrupted;  // payload copies of corrupting sends
  corrupted.reserve(transfers.size());
  for (Transfer& t : transfers) {
    t.done = 0;
    if (t.send && t.link.corrupt && t.bytes > 0) {
      const char* src = static_cast<const char*>(t.data);
      corrupted.emplace_back(src, src + t.bytes);
      sim::CorruptPayload(corrupted.back().data(), t.bytes);
      t.data = corrupted.back().data();
    }
    if (t.send) {
      t.header = MessageHeader{kMessageMagic, t.tag, t.bytes};
      t.ready_ns = start + t.link.delay_us * 1000;
    }
  }
  std::vector<pollfd> pfds;
  std::vector<int> send_head;  // per pfd: index of the head send, -1 none
  std::vector<int> recv_head;
  for (;;) {
    pfds.clear();
    send_head.clear();
    recv_head.clear();
    int64_t wake_ns = -1;
    const int64_t now = NowNs();
    bool any_left = false;
    for (size_t i = 0; i < transfers.size(); ++i) {
      Transfer& t = transfers[i];
      if (Complete(t)) continue;
      any_left = true;
      size_t slot = 0;
      while (slot < pfds.size() && pfds[slot].fd != t.fd) ++slot;
      if (slot == pfds.size()) {
        pfds.push_back(pollfd{t.fd, 0, 0});
        send_head.push_back(-1);
        recv_head.push_back(-1);
      }
      if (t.send) {
        if (send_head[slot] != -1) continue;
        send_head[slot] = static_cast<int>(i);
        int64_t wake = -1;
        if (now < t.ready_ns) {
          wake = t.ready_ns;
        } else {
          ncclResult_t code = ncclSuccess;
          if (!ProgressSend(t, now, &wake, &code, error)) return code;
          if (Complete(t)) {
            send_head[slot] = -1;
            continue;
          }
          if (wake < 0) pfds[slot].events |= POLLOUT;
        }
        if (wake >= 0 && (wake_ns < 0 || wake < wake_ns)) wake_ns = wake;
      } else {
        if (recv_head[slot] != -1) continue;
        recv_head[slot] = static_cast<int>(i);
        pfds[slot].events |= POLLIN;
      }
    }
    if (!any_left) return ncclSuccess;
    any_left = false;
    for (const Transfer& t : transfers) any_left |= !Complete(t);
    if (!any_left) return ncclSuccess;
    // A socket whose transfers all completed in this pass is not polled (a hang-up on it
    // must not wake this loop over and over).
    for (size_t s = 0; s < pfds.size(); ++s) {
      if (send_head[s] == -1 && recv_head[s] == -1) pfds[s].fd = -1;
    }
    int64_t until = wake_ns;
    if (deadline_ns >= 0 && (until < 0 || deadline_ns < until)) until = deadline_ns;
    timespec ts;
    timespec* tsp = nullptr;
    if (until >= 0) {
      ts = ToTimespec(std::max<int64_t>(0, until - NowNs()));
      tsp = &ts;
    }
    int r = ppoll(pfds.data(), pfds.size(), tsp, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;
      *error = ErrnoText("ppoll");
      return ncclSystemError;
    }
    if (deadline_ns >= 0 && NowNs() >= deadline_ns) {
      int waiting_peer = -1;
      for (const Transfer& t : transfers) {
        if (!Complete(t)) {
          waiting_peer = t.peer;
          break;
        }
      }
      *error = "timed out (PEREGRINE_NCCL_TIMEOUT_MS) waiting for peer rank " +
               std::to_string(waiting_peer);
      return ncclSystemError;
    }
    for (size_t s = 0; s < pfds.size(); ++s) {
      const short re = pfds[s].revents;
      if (re == 0) continue;
      ncclResult_t code = ncclSuccess;
      if (recv_head[s] >= 0 && (re & (POLLIN | POLLHUP | POLLERR))) {
        if (!ProgressRecv(transfers[recv_head[s]], &code, error)) return code;
      }
      if (send_head[s] >= 0 && (re & (POLLOUT | POLLERR | POLLHUP))) {
        Transfer& t = transfers[send_head[s]];
        const int64_t t_now = NowNs();
        if (t_now >= t.ready_ns) {
          int64_t wake = -1;
          if (!ProgressSend(t, t_now, &wake, &code, error)) return code;
        } else if (re & (POLLERR | POLLHUP)) {
          *error = "connection to peer rank " + std::to_string(t.peer) +
                   " hung up (peer process gone?)";
          return ncclRemoteError;
        }
      }
      if ((re & POLLNVAL) != 0) {
        *error = "socket to peer closed locally (communicator aborted)";
        return ncclSystemError;
      }
    }
  }
}

}  // namespace peregrine::simnccl
