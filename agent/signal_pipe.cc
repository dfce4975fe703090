#include "agent/signal_pipe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

int g_write_fd = -1;
int g_read_fd = -1;
std::mutex g_install_mu;

void OnSignal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  ssize_t ignored = ::write(g_write_fd, &byte, 1);
  (void)ignored;
  errno = saved;
}

}  // namespace

absl::StatusOr<int> InstallSignalPipe(const std::vector<int>& signals) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  if (g_read_fd < 0) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return absl::InternalError(absl::StrCat("signal pipe: ", std::strerror(errno)));
    }
    g_read_fd = fds[0];
    g_write_fd = fds[1];
  }
  for (int signo : signals) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = &OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | (signo == SIGCHLD ? SA_NOCLDSTOP : 0);
    if (::sigaction(signo, &action, nullptr) != 0) {
      return absl::InternalError(absl::StrCat("sigaction(", signo, "): ", std::strerror(errno)));
    }
  }
  return g_read_fd;
}

std::vector<int> DrainSignalPipe(int fd) {
  std::vector<int> out;
  unsigned char buffer[256];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) out.push_back(buffer[i]);
  }
  return out;
}

}  // namespace peregrine
