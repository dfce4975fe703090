// peregrine-diagnose: runs one stop-time diagnostic on this machine and prints its result.
//
// Started by the agent (agent/diagnostics/diagnostic_runner.h), never by hand in production,
// though it runs fine by hand:
//   peregrine-diagnose --kind KIND [--param KEY=VALUE]... [--timeout-ms N] [--machine-id ID]
//       [--gpus N] [--rank-base N] [--tools-dir DIR] [--pid-file PATH]
//       [--command-arg ARG]... [--code-env KEY=VALUE]...
// Output: the last line is "peregrine-diagnose: result <DiagnosticResult, protobuf text>",
// exit 0 (whether or not the diagnostic passed); "peregrine-diagnose: invalid: <message>"
// and exit 2 for an unknown kind or a malformed param or flag ("peregrine-diagnose:
// unimplemented: <message>" for a kind this build cannot run); "peregrine-diagnose: status
// <code> <message>" and exit 1 when it cannot run here (e.g. 9 FAILED_PRECONDITION: a replay
// without a training command).
// The processes it starts die with it (PR_SET_PDEATHSIG); the agent kills its process group
// at the backstop timeout.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/diagnostics/diagnostic_invocation.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "google/protobuf/text_format.h"

extern char** environ;

namespace {

int Invalid(const std::string& message) {
  std::printf("peregrine-diagnose: invalid: %s\n", message.c_str());
  std::fflush(stdout);
  return 2;
}

// The directory of this executable, where the tools it runs live. Run through the agent
// image's bundle launcher (docker/bundle-runtime.sh), /proc/self/exe is the bundled dynamic
// loader, and argv[0] (the launcher's --argv0) names the launcher next to the other tools'.
std::string OwnDirectory(const char* argv0) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::string();
  const std::string name = self.filename().string();
  if (name.rfind("ld-", 0) == 0 && argv0 != nullptr && std::string(argv0).find('/') != std::string::npos) {
    return std::filesystem::path(argv0).parent_path().string();
  }
  return self.parent_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace peregrine;
  signal(SIGPIPE, SIG_IGN);
  DiagnosticInvocation inv;
  inv.tools_dir = OwnDirectory(argc > 0 ? argv[0] : nullptr);
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos && eq > 0) inv.env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  int64_t timeout_ms = 0;
  std::string pid_file;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Invalid(absl::StrCat("flag ", flag, " needs a value"));
    const std::string value = argv[++i];
    auto key_value = [&value](std::string* k, std::string* v) {
      const size_t eq = value.find('=');
      if (eq == std::string::npos || eq == 0) return false;
      *k = value.substr(0, eq);
      *v = value.substr(eq + 1);
      return true;
    };
    std::string k, v;
    if (flag == "--kind") {
      inv.kind = value;
    } else if (flag == "--param" && key_value(&k, &v)) {
      inv.params[k] = v;
    } else if (flag == "--timeout-ms" && absl::SimpleAtoi(value, &timeout_ms) && timeout_ms > 0) {
    } else if (flag == "--machine-id") {
      inv.machine_id = value;
    } else if (flag == "--gpus" && absl::SimpleAtoi(value, &inv.gpus) && inv.gpus >= 1 && inv.gpus <= 1024) {
    } else if (flag == "--rank-base" && absl::SimpleAtoi(value, &inv.rank_base) && inv.rank_base >= 0) {
    } else if (flag == "--tools-dir") {
      inv.tools_dir = value;
    } else if (flag == "--pid-file") {
      pid_file = value;
    } else if (flag == "--command-arg") {
      inv.command.push_back(value);
    } else if (flag == "--code-env" && key_value(&k, &v)) {
      inv.code_env[k] = v;
    } else {
      return Invalid(absl::StrCat("bad flag or value: ", flag, " ", value));
    }
  }
  if (inv.kind.empty()) return Invalid("--kind is required");
  if (!pid_file.empty()) std::ofstream(pid_file) << ::getpid() << "\n";
  inv.timeout = DiagnosticTimeout(inv.kind, inv.params, static_cast<uint32_t>(timeout_ms));
  const absl::Time start = inv.clock->Now();
  inv.deadline = start + inv.timeout;
  DiagnosticResultOr result = RunDiagnosticKind(inv);
  if (!result.ok()) {
    if (result.status().code() == absl::StatusCode::kInvalidArgument) {
      return Invalid(std::string(result.status().message()));
    }
    if (result.status().code() == absl::StatusCode::kUnimplemented) {
      std::printf("peregrine-diagnose: unimplemented: %s\n", std::string(result.status().message()).c_str());
      std::fflush(stdout);
      return 2;
    }
    std::printf("peregrine-diagnose: status %d %s\n", static_cast<int>(result.status().code()),
                std::string(result.status().message()).c_str());
    std::fflush(stdout);
    return 1;
  }
  result->set_kind(inv.kind);
  result->set_machine_id(inv.machine_id);
  result->set_seconds(absl::ToDoubleSeconds(inv.clock->Now() - start));
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string text;
  printer.PrintToString(*result, &text);
  std::printf("peregrine-diagnose: result %s\n", text.c_str());
  std::fflush(stdout);
  return 0;
}
