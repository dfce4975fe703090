#include "tests/testing/process_guard.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace peregrine::testing {

std::vector<pid_t> Descendants() {
  // The parent of every process (field 4 of /proc/<pid>/stat, after the parenthesised
  // command name, which may itself contain spaces and parentheses).
  std::map<pid_t, std::vector<pid_t>> children;
  if (DIR* proc = ::opendir("/proc")) {
    while (struct dirent* entry = ::readdir(proc)) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 0) continue;
      std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
      std::string stat;
      if (!std::getline(in, stat)) continue;
      const size_t close_paren = stat.rfind(')');
      if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) continue;
      const std::string rest = stat.substr(close_paren + 2);
      const size_t sp = rest.find(' ');
      if (sp == std::string::npos) continue;
      children[std::atoi(rest.c_str() + sp + 1)].push_back(pid);
    }
    ::closedir(proc);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> queue = {::getpid()};
  while (!queue.empty()) {
    const pid_t pid = queue.back();
    queue.pop_back();
    for (pid_t child : children[pid]) {
      out.push_back(child);
      queue.push_back(child);
    }
  }
  return out;
}

bool NoDescendantsLeft() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return Descendants().empty();
}

DescendantGuard::DescendantGuard() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

DescendantGuard::~DescendantGuard() {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    const std::vector<pid_t> left = Descendants();
    if (left.empty()) return;
    for (pid_t pid : left) ::kill(pid, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace peregrine::testing
