#include "agent/stack_capture.h"

#include <dirent.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/supervisor.h"

namespace peregrine {
namespace {

std::optional<pid_t> ParentOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return std::nullopt;
  std::vector<absl::string_view> fields = absl::StrSplit(absl::string_view(stat).substr(close_paren + 2), ' ');
  pid_t ppid = 0;
  if (fields.size() < 2 || fields[0] == "Z" || !absl::SimpleAtoi(fields[1], &ppid)) return std::nullopt;
  return ppid;
}

std::string CommandLine(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() > 4096) raw.resize(4096);
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& c : raw) {
    if (c == '\0') c = ' ';
  }
  return raw;
}

bool IsPython(pid_t pid) {
  char target[4096];
  ssize_t n = ::readlink(absl::StrCat("/proc/", pid, "/exe").c_str(), target, sizeof(target) - 1);
  std::string exe = n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
  std::string base = exe.substr(exe.rfind('/') + 1);
  if (absl::StartsWith(base, "python")) return true;
  std::ifstream comm(absl::StrCat("/proc/", pid, "/comm"));
  std::string name;
  std::getline(comm, name);
  return absl::StartsWith(name, "python");
}

bool OnPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  return ResolveExecutable(tool, path != nullptr ? path : "/usr/bin:/bin").ok();
}

}  // namespace

std::vector<StackTarget> WithDescendants(const std::vector<StackTarget>& roots) {
  std::map<pid_t, std::vector<pid_t>> children;
  if (DIR* proc = ::opendir("/proc")) {
    while (struct dirent* entry = ::readdir(proc)) {
      pid_t pid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 0) continue;
      if (std::optional<pid_t> ppid = ParentOf(pid)) children[*ppid].push_back(pid);
    }
    ::closedir(proc);
  }
  std::vector<StackTarget> out;
  absl::flat_hash_set<pid_t> seen;
  for (const StackTarget& root : roots) {
    if (seen.insert(root.pid).second) out.push_back(root);
  }
  std::deque<pid_t> queue;
  for (const StackTarget& root : roots) queue.push_back(root.pid);
  while (!queue.empty()) {
    pid_t pid = queue.front();
    queue.pop_front();
    auto it = children.find(pid);
    if (it == children.end()) continue;
    for (pid_t child : it->second) {
      if (!seen.insert(child).second) continue;
      out.push_back(StackTarget{child, -1});
      queue.push_back(child);
    }
  }
  return out;
}

std::vector<CapturedStack> CaptureStacks(const std::vector<StackTarget>& targets,
                                         const StackCaptureOptions& options) {
  const bool have_py_spy = OnPath("py-spy");
  const bool have_eu_stack = ::access("/usr/bin/eu-stack", X_OK) == 0 || OnPath("eu-stack");
  const bool have_gdb = OnPath("gdb");
  std::vector<CapturedStack> out;
  for (const StackTarget& target : targets) {
    CapturedStack captured;
    captured.pid = target.pid;
    captured.global_rank = target.global_rank;
    captured.command = CommandLine(target.pid);
    const std::string pid = absl::StrCat(target.pid);
    std::vector<std::pair<std::string, std::vector<std::string>>> plan;
    if (have_py_spy && IsPython(target.pid)) {
      std::vector<std::string> argv = {"py-spy", "dump", "--pid", pid};
      if (options.include_native) argv.push_back("--native");
      plan.emplace_back("py-spy", argv);
    }
    if (have_eu_stack) {
      std::string eu = ::access("/usr/bin/eu-stack", X_OK) == 0 ? "/usr/bin/eu-stack" : "eu-stack";
      plan.emplace_back("eu-stack", std::vector<std::string>{eu, "-p", pid});
    }
    if (have_gdb) {
      plan.emplace_back("gdb", std::vector<std::string>{"gdb", "-nx", "-batch", "-ex", "thread apply all bt", "-p", pid});
    }
    std::string failures;
    for (const auto& [tool, argv] : plan) {
      absl::StatusOr<ToolRun> run = RunTool(argv, options.timeout_per_process, options.max_raw_bytes);
      captured.tool = tool;
      if (!run.ok()) {
        absl::StrAppend(&failures, tool, ": ", run.status().ToString(), "\n");
        continue;
      }
      const bool succeeded = !run->timed_out && run->signal == 0 && run->exit_code == 0 && !run->output.empty();
      if (succeeded) {
        captured.raw = std::move(run->output);
        captured.ok = true;
        break;
      }
      absl::StrAppend(&failures, tool, ": ",
                      run->timed_out ? "timed out" : absl::StrCat("exit ", run->exit_code, " signal ", run->signal),
                      "\n", run->output, "\n");
    }
    if (!captured.ok) {
      captured.raw = plan.empty() ? "no stack tool available (py-spy, eu-stack, gdb)" : failures;
      if (captured.raw.size() > options.max_raw_bytes) captured.raw.resize(options.max_raw_bytes);
    }
    out.push_back(std::move(captured));
  }
  return out;
}

}  // namespace peregrine
