// pg_microbatches (client/peregrine_client.h): the rank's share of a step under the
// agent's micro-batch plan.
//
// The plan file is replaced by rename (agent/microbatch_plan_file.h), so a reader opens
// either the old file or the new one. One stat per call tells whether the file changed
// since it was last parsed (device, inode, size, mtime); only then is it read (at most
// kMaxPlanBytes) and parsed again. The parsed result, an error included, is cached under
// a process-wide mutex.

#pragma GCC visibility push(default)
#include "client/peregrine_client.h"
#pragma GCC visibility pop

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/microbatch_plan_format.h"

namespace {

using peregrine::MicroBatchPlan;

constexpr char kPlanEnv[] = "PEREGRINE_MICROBATCH_PLAN";
constexpr size_t kMaxPlanBytes = 1 << 20;

struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

struct PlanCache {
  std::mutex mu;
  std::string path;
  std::optional<FileIdentity> identity;
  absl::StatusOr<MicroBatchPlan> plan = absl::UnknownError("not read");
};

PlanCache& Cache() {
  static PlanCache* cache = new PlanCache();
  return *cache;
}

void SetError(char* err, size_t err_len, const std::string& message) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(message.size(), err_len - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

absl::StatusOr<MicroBatchPlan> ReadPlan(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open: ", std::strerror(errno)));
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("read: ", std::strerror(e)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxPlanBytes) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("larger than ", kMaxPlanBytes, " bytes"));
    }
  }
  ::close(fd);
  return peregrine::ParseMicroBatchPlan(text);
}

}  // namespace

extern "C" {

int pg_microbatches(uint64_t step, uint32_t dp_rank, uint32_t default_count, uint32_t* first, uint32_t* count,
                    double* gradient_scale, char* err, size_t err_len) {
  SetError(err, err_len, "");
  if (count == nullptr || gradient_scale == nullptr || default_count == 0) {
    SetError(err, err_len, "pg_microbatches: default_count must be >= 1 and count, gradient_scale non-NULL");
    return PG_ERROR;
  }
  // The even split, unless a plan says otherwise.
  *count = default_count;
  *gradient_scale = 1.0 / static_cast<double>(default_count);
  if (first != nullptr) *first = dp_rank * default_count;
  const char* env = std::getenv(kPlanEnv);
  if (env == nullptr || *env == '\0') return PG_NO_AGENT;
  const std::string path = env;
  auto fail = [&](const std::string& why) {
    SetError(err, err_len, absl::StrCat("micro-batch plan ", path, ": ", why));
    return PG_ERROR;
  };
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return PG_NOT_FOUND;
    return fail(absl::StrCat("stat: ", std::strerror(errno)));
  }
  const FileIdentity identity{st.st_dev, st.st_ino, st.st_size,
                              static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
  MicroBatchPlan plan;
  {
    PlanCache& cache = Cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    if (cache.path != path || cache.identity != identity) {
      cache.path = path;
      cache.identity = identity;
      cache.plan = ReadPlan(path);
    }
    if (!cache.plan.ok()) return fail(std::string(cache.plan.status().message()));
    plan = *cache.plan;
  }
  if (step < plan.from_step) return PG_NOT_FOUND;
  const uint64_t even_total = static_cast<uint64_t>(plan.counts.size()) * default_count;
  if (plan.global_micro_batches != even_total) {
    return fail(absl::StrCat("global_micro_batches: ", plan.global_micro_batches, ", but ", plan.counts.size(),
                             " replicas x default_count ", default_count, " = ", even_total,
                             " (the plan was made for another batch)"));
  }
  absl::StatusOr<peregrine::MicroBatchShare> share = peregrine::ShareOf(plan, dp_rank);
  if (!share.ok()) return fail(std::string(share.status().message()));
  *count = share->count;
  *gradient_scale = plan.gradient_scale;
  if (first != nullptr) *first = share->first;
  return PG_OK;
}

}  // extern "C"
