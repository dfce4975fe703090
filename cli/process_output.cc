#include "cli/process_output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace peregrine {

absl::StatusOr<std::string> RunForOutput(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& extra_env) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to run");
  // Everything the child needs is built before the fork: after it, only async-signal-safe
  // calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (!extra_env.contains(name)) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : extra_env) env_strings.push_back(absl::StrCat(name, "=", value));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int out[2], errp[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::UnavailableError("pipe failed");
  if (pipe2(errp, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::UnavailableError("pipe failed");
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(errp[1], 2);
    execvpe(args[0], args.data(), envp.data());
    _exit(127);
  }
  if (devnull >= 0) close(devnull);
  close(out[1]);
  close(errp[1]);
  if (pid < 0) {
    close(out[0]);
    close(errp[0]);
    return absl::UnavailableError("fork failed");
  }
  // Both pipes are read together, so a program that fills one while we wait on the other
  // cannot block.
  std::string text[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        text[i].append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string why = code == 127 ? " could not be run" : WIFEXITED(status) ? absl::StrCat(" failed (exit ", code, ")")
                                                                             : " was killed by a signal";
    const absl::string_view err = absl::StripAsciiWhitespace(text[1]);
    return absl::UnavailableError(absl::StrCat(argv[0], why, err.empty() ? "" : ": ", err));
  }
  return text[0];
}

}  // namespace peregrine
