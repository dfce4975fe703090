#include "agent/diagnostics/diagnostic_runner.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "google/protobuf/text_format.h"

namespace peregrine {
namespace {

constexpr int kInvalidArgument = 3;
constexpr int kUnimplemented = 12;
constexpr int kInternal = 13;
constexpr char kResultPrefix[] = "peregrine-diagnose: result ";
constexpr char kInvalidPrefix[] = "peregrine-diagnose: invalid: ";
constexpr char kUnimplementedPrefix[] = "peregrine-diagnose: unimplemented: ";
constexpr char kStatusPrefix[] = "peregrine-diagnose: status ";

std::string LastLines(const std::string& text, size_t n) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  const size_t from = lines.size() > n ? lines.size() - n : 0;
  std::string out;
  for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&out, i == from ? "" : " | ", lines[i]);
  return out;
}

}  // namespace

std::vector<std::string> DiagnoseHelperArgv(const std::string& helper_binary, const DiagnosticRunRequest& request,
                                            absl::Duration timeout, const std::string& pid_file) {
  std::vector<std::string> argv = {helper_binary,
                                   "--kind", request.kind,
                                   "--timeout-ms", absl::StrCat(absl::ToInt64Milliseconds(timeout)),
                                   "--machine-id", request.machine_id,
                                   "--gpus", absl::StrCat(request.gpus),
                                   "--rank-base", absl::StrCat(request.rank_base)};
  if (!pid_file.empty()) {
    argv.push_back("--pid-file");
    argv.push_back(pid_file);
  }
  for (const auto& [key, value] : request.params) {
    argv.push_back("--param");
    argv.push_back(absl::StrCat(key, "=", value));
  }
  for (const std::string& arg : request.command) {
    argv.push_back("--command-arg");
    argv.push_back(arg);
  }
  for (const auto& [key, value] : request.code_env) {
    argv.push_back("--code-env");
    argv.push_back(absl::StrCat(key, "=", value));
  }
  return argv;
}

std::pair<v1::Status, v1::DiagnosticResult> InterpretHelperRun(const absl::StatusOr<HelperRun>& run,
                                                               const DiagnosticRunRequest& request,
                                                               absl::Duration timeout, double seconds) {
  v1::Status status;
  v1::DiagnosticResult result;
  result.set_kind(request.kind);
  result.set_machine_id(request.machine_id);
  result.set_seconds(seconds);
  if (!run.ok()) {
    status.set_code(kInternal);
    status.set_message(absl::StrCat(request.kind, ": cannot run the diagnostic helper: ", run.status().ToString()));
    return {status, result};
  }
  // The helper's own verdict wins when it printed one (it reports its own timeouts).
  for (absl::string_view line : absl::StrSplit(run->output, '\n')) {
    if (absl::ConsumePrefix(&line, kInvalidPrefix)) {
      status.set_code(kInvalidArgument);
      status.set_message(std::string(line));
      return {status, result};
    }
    if (absl::ConsumePrefix(&line, kUnimplementedPrefix)) {
      status.set_code(kUnimplemented);
      status.set_message(std::string(line));
      return {status, result};
    }
    if (absl::ConsumePrefix(&line, kStatusPrefix)) {
      std::pair<std::string, std::string> code_message = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      int code = 0;
      if (absl::SimpleAtoi(code_message.first, &code) && code > 0 && code < 17) {
        status.set_code(code);
        status.set_message(code_message.second);
        return {status, result};
      }
    }
    if (absl::ConsumePrefix(&line, kResultPrefix)) {
      v1::DiagnosticResult parsed;
      if (google::protobuf::TextFormat::ParseFromString(std::string(line), &parsed)) {
        parsed.set_kind(request.kind);
        parsed.set_machine_id(request.machine_id);
        if (parsed.seconds() <= 0) parsed.set_seconds(seconds);
        return {status, parsed};
      }
    }
  }
  if (run->timed_out) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("timed out after ", absl::ToInt64Milliseconds(timeout), " ms"));
    return {status, result};
  }
  status.set_code(kInternal);
  status.set_message(absl::StrCat(request.kind, ": the diagnostic helper ended without a result (exit ",
                                  run->exit_code, ", signal ", run->signal, "): ", LastLines(run->output, 5)));
  return {status, result};
}

DiagnosticRunner::DiagnosticRunner(DiagnosticRunnerOptions options) : options_(std::move(options)) {
  std::error_code ec;
  if (!options_.scratch_dir.empty()) std::filesystem::create_directories(options_.scratch_dir, ec);
  worker_ = std::thread([this] { Work(); });
}

DiagnosticRunner::~DiagnosticRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
    if (!running_pid_file_.empty()) {
      std::ifstream in(running_pid_file_);
      pid_t pid = 0;
      // The helper leads its own process group (the spawner starts it so): kill it all.
      if (in >> pid && pid > 1) ::kill(-pid, SIGKILL);
    }
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

absl::Status DiagnosticRunner::Submit(DiagnosticRunRequest request, Done done) {
  if (absl::Status s = ValidateDiagnostic(request.kind, request.params); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the agent is shutting down");
    queue_.emplace_back(std::move(request), std::move(done));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

void DiagnosticRunner::Work() {
  while (true) {
    std::pair<DiagnosticRunRequest, Done> item;
    std::string pid_file;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      if (!options_.scratch_dir.empty()) {
        pid_file = absl::StrCat(options_.scratch_dir, "/diagnostic-", ::getpid(), "-", ++sequence_, ".pid");
      }
      running_pid_file_ = pid_file;
    }
    const DiagnosticRunRequest& request = item.first;
    const absl::Duration timeout = DiagnosticTimeout(request.kind, request.params, request.timeout_ms);
    const absl::Time start = options_.clock->Now();
    absl::StatusOr<HelperRun> run =
        options_.spawn(DiagnoseHelperArgv(options_.helper_binary, request, timeout, pid_file),
                       timeout + options_.backstop_margin);
    const double seconds = absl::ToDoubleSeconds(options_.clock->Now() - start);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_pid_file_.clear();
      std::error_code ec;
      if (!pid_file.empty()) std::filesystem::remove(pid_file, ec);
      if (stopping_) return;
    }
    auto [status, result] = InterpretHelperRun(run, request, timeout, seconds);
    item.second(status, result);
  }
}

}  // namespace peregrine
