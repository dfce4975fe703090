#include "agent/stack_capture.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>

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

// RANK from /proc/PID/environ (a rank started by a per-machine launcher), or -1.
int RankFromEnvironment(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/environ"), std::ios::binary);
  std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (absl::string_view entry : absl::StrSplit(env, '\0')) {
    int rank = -1;
    if (absl::ConsumePrefix(&entry, "RANK=") && absl::SimpleAtoi(entry, &rank) && rank >= 0) return rank;
  }
  return -1;
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
  // Breadth first; a descendant belongs to its nearest ancestor's rank, or (under a
  // launcher that is no rank) to the RANK its environment names.
  std::deque<StackTarget> queue(out.begin(), out.end());
  while (!queue.empty()) {
    const StackTarget parent = queue.front();
    queue.pop_front();
    auto it = children.find(parent.pid);
    if (it == children.end()) continue;
    for (pid_t child : it->second) {
      if (!seen.insert(child).second) continue;
      const int rank = parent.global_rank >= 0 ? parent.global_rank : RankFromEnvironment(child);
      out.push_back(StackTarget{child, rank});
      queue.push_back(out.back());
    }
  }
  return out;
}

namespace {

// A tool's output is read up to this many times the per-process cap, so the cut can
// say how much it dropped.
constexpr size_t kReadFactor = 4;

// The command that runs each tool ("" when it is not there).
struct Tools {
  std::string py_spy;
  std::string eu_stack;
  std::string gdb;
};

// `tool` when it is on PATH, else <tool_dir>/<tool> when that is executable, else "".
std::string FindTool(const std::string& tool, const std::string& tool_dir) {
  if (OnPath(tool)) return tool;
  if (tool_dir.empty()) return "";
  std::string path = absl::StrCat(tool_dir, "/", tool);
  return ::access(path.c_str(), X_OK) == 0 ? path : "";
}

CapturedStack CaptureOne(const StackTarget& target, const Tools& tools, const StackCaptureOptions& options) {
  const size_t max_raw = std::min(options.max_raw_bytes, kMaxStackBytesPerProcess);
  CapturedStack captured;
  captured.pid = target.pid;
  captured.global_rank = target.global_rank;
  captured.command = CommandLine(target.pid);
  const std::string pid = absl::StrCat(target.pid);
  std::vector<std::pair<std::string, std::vector<std::string>>> plan;
  if (!tools.py_spy.empty() && IsPython(target.pid)) {
    std::vector<std::string> argv = {tools.py_spy, "dump", "--pid", pid};
    if (options.include_native) argv.push_back("--native");
    plan.emplace_back("py-spy", argv);
  }
  if (!tools.eu_stack.empty()) {
    plan.emplace_back("eu-stack", std::vector<std::string>{tools.eu_stack, "-p", pid});
  }
  if (!tools.gdb.empty()) {
    plan.emplace_back("gdb",
                      std::vector<std::string>{tools.gdb, "-nx", "-batch", "-ex", "thread apply all bt", "-p", pid});
  }
  std::string failures;
  for (const auto& [tool, argv] : plan) {
    // Read past the cap (to count what is cut), then cut.
    absl::StatusOr<ToolRun> run = RunTool(argv, options.timeout_per_process, kReadFactor * max_raw, options.clock);
    captured.tool = tool;
    if (!run.ok()) {
      absl::StrAppend(&failures, tool, ": ", run.status().ToString(), "\n");
      continue;
    }
    const bool succeeded = !run->timed_out && run->signal == 0 && run->exit_code == 0 && !run->output.empty();
    if (succeeded) {
      const bool cut_by_tool = run->output.size() > kReadFactor * max_raw;  // RunTool's own marker
      captured.raw = TruncateStackText(std::move(run->output), max_raw, cut_by_tool);
      captured.ok = true;
      break;
    }
    absl::StrAppend(&failures, tool, ": ",
                    run->timed_out ? "timed out" : absl::StrCat("exit ", run->exit_code, " signal ", run->signal),
                    "\n", run->output, "\n");
  }
  if (!captured.ok) {
    captured.raw = plan.empty() ? "no stack tool available (py-spy, eu-stack, gdb)" : failures;
    captured.raw = TruncateStackText(std::move(captured.raw), max_raw);
  }
  return captured;
}

}  // namespace

std::string TruncateStackText(std::string text, size_t max_bytes, bool at_least) {
  if (text.size() <= max_bytes) return text;
  constexpr size_t kMarkerRoom = 64;  // "\n... truncated at least 18446744073709551615 bytes" fits
  size_t keep = max_bytes > kMarkerRoom ? max_bytes - kMarkerRoom : 0;
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  const size_t cut = text.size() - keep;
  text.resize(keep);
  absl::StrAppend(&text, "\n... truncated ", at_least ? "at least " : "", cut, " bytes");
  return text;
}

std::vector<CapturedStack> CaptureStacks(const std::vector<StackTarget>& targets,
                                         const StackCaptureOptions& options) {
  Tools tools;
  tools.py_spy = FindTool("py-spy", options.tool_dir);
  tools.eu_stack = FindTool("eu-stack", options.tool_dir);
  tools.gdb = FindTool("gdb", options.tool_dir);
  std::vector<CapturedStack> out(targets.size());
  // A bounded pool: one stuck process costs its timeout, not everyone's.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < targets.size(); i = next++) out[i] = CaptureOne(targets[i], tools, options);
  };
  const size_t workers = std::min(targets.size(), static_cast<size_t>(std::max(1, options.max_parallel)));
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

}  // namespace peregrine
