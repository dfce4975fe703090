// Test helpers: find and clean up every descendant of the test process.
//
// The test process makes itself a child subreaper, so processes orphaned by a
// test's children come back to it and stay visible as descendants.
// DescendantGuard kills and reaps all descendants when it goes out of scope,
// so a failing test leaks nothing. Tests only.
#ifndef PEREGRINE_TESTS_AGENT_PROCESS_TEST_UTIL_H_
#define PEREGRINE_TESTS_AGENT_PROCESS_TEST_UTIL_H_

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace peregrine::testing {

// Every process below the test process (zombies included).
inline std::vector<pid_t> Descendants() {
  std::map<pid_t, std::vector<pid_t>> children;
  if (DIR* proc = ::opendir("/proc")) {
    while (struct dirent* entry = ::readdir(proc)) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 0) continue;
      std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
      std::string stat;
      if (!std::getline(in, stat)) continue;
      size_t close_paren = stat.rfind(')');
      if (close_paren == std::string::npos) continue;
      std::string rest = stat.substr(close_paren + 2);
      size_t sp = rest.find(' ');
      if (sp == std::string::npos) continue;
      pid_t ppid = std::atoi(rest.c_str() + sp + 1);
      children[ppid].push_back(pid);
    }
    ::closedir(proc);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> queue = {::getpid()};
  while (!queue.empty()) {
    pid_t pid = queue.back();
    queue.pop_back();
    for (pid_t child : children[pid]) {
      out.push_back(child);
      queue.push_back(child);
    }
  }
  return out;
}

// Polls `condition` until it holds or `limit` passes (a generous limit that only
// a broken implementation reaches).
inline bool Eventually(const std::function<bool()>& condition, absl::Duration limit = absl::Seconds(60)) {
  const absl::Time deadline = absl::Now() + limit;
  while (true) {
    if (condition()) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// Reaps zombies among our direct children; returns true when none is left.
inline bool NoDescendantsLeft() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return Descendants().empty();
}

class DescendantGuard {
 public:
  DescendantGuard() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  ~DescendantGuard() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      std::vector<pid_t> left = Descendants();
      if (left.empty()) return;
      for (pid_t pid : left) ::kill(pid, SIGKILL);
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_PROCESS_TEST_UTIL_H_
