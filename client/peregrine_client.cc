// The C ABI of libperegrine_client.so (client/peregrine_client.h).
//
// Save, in the rank's store directory D (PEREGRINE_CHECKPOINT_DIR):
//   1. reap the snapshot child still in flight, if any (its result waits for pg_wait);
//   2. lay out the shard (checkpoint/shard_format.h) and check its size against this
//      rank's allowance (PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES) and RLIMIT_FSIZE; over
//      either, write D/step-N.skipped holding the reason and return PG_SKIPPED;
//   3. prepare everything the writer needs (shard_writer.h: paths, the encoded header,
//      the copy list, the name of a free-*.buf the agent kept, whose pages are already
//      allocated so the copy faults no fresh shared memory);
//   4. copy mode: run the writer here (claim the free buffer by rename or create
//      D/step-N.tmp, size and allocate it, map it, copy in parallel, header, rename to
//      D/step-N.shard) and return its result. Snapshot mode: fork; the child runs the same
//      writer single-threaded from its copy-on-write view of memory (snapshot.h) and the
//      trainer returns PG_OK at once. A child that cannot be forked falls back to copy.
// The agent fills in the checksum (FinishShard) of a published shard before it counts as
// stored. Any failure removes the .tmp file. Saves are serialised by one process-wide
// mutex, which also guards the snapshot state and the unreported results.
//
// Load first waits for the snapshot in flight (it may be the step asked for), then maps
// D/step-N.shard read-only and runs VerifyShard over it: a shard whose checksum is unset
// or wrong is never returned.
//
// The environment is read on every call (cheap, and a test may change it in-process).

// The library is compiled with hidden visibility; only the C ABI is exported.
#pragma GCC visibility push(default)
#include "client/peregrine_client.h"
#pragma GCC visibility pop

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/shard_format.h"
#include "client/shard_writer.h"
#include "client/snapshot.h"

namespace {

namespace ckpt = peregrine::checkpoint;
using peregrine::client::ShardPlan;
using peregrine::client::ShardRange;
using peregrine::client::SnapshotResult;
using peregrine::client::WriteOutcome;

constexpr char kDirEnv[] = "PEREGRINE_CHECKPOINT_DIR";
constexpr char kAllowanceEnv[] = "PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES";
constexpr char kResumeEnv[] = "PEREGRINE_RESUME_STEP";
constexpr char kModeEnv[] = "PEREGRINE_CHECKPOINT_MODE";

std::mutex save_mu;  // one save at a time per process

void SetError(char* err, size_t err_len, const std::string& message) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(message.size(), err_len - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

int Fail(char* err, size_t err_len, int code, const std::string& message) {
  SetError(err, err_len, message);
  return code;
}

std::string Errno(int e) { return std::strerror(e); }

// A set, non-empty environment variable, or "".
std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// Parses a decimal unsigned integer (no sign, no spaces, no overflow).
bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// An optional numeric variable: absent -> fallback; malformed -> false with a message.
bool EnvU64(const char* name, uint64_t fallback, uint64_t* out, std::string* message) {
  const std::string v = Env(name);
  if (v.empty()) {
    *out = fallback;
    return true;
  }
  if (!ParseU64(v, out)) {
    *message = std::string(name) + "=\"" + v + "\" is not a non-negative integer";
    return false;
  }
  return true;
}

// Writes `reason` to dir/step-N.skipped (temp + rename so the agent never reads half).
bool WriteSkippedMarker(const std::string& dir, uint64_t step, const std::string& reason, std::string* message) {
  const std::string final_path = dir + "/" + ckpt::SkippedMarkerName(step);
  const std::string tmp_path = final_path + ".writing";
  const int fd = open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    *message = "cannot write the skip marker " + tmp_path + ": " + Errno(errno);
    return false;
  }
  const std::string line = reason + "\n";
  const ssize_t n = write(fd, line.data(), line.size());
  const int write_errno = errno;
  close(fd);
  if (n != static_cast<ssize_t>(line.size()) || rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    const int e = n != static_cast<ssize_t>(line.size()) ? write_errno : errno;
    unlink(tmp_path.c_str());
    *message = "cannot write the skip marker " + final_path + ": " + Errno(e);
    return false;
  }
  return true;
}

// The skip path: a marker with the reason, PG_SKIPPED, and the reason in err.
int Skip(const std::string& dir, uint64_t step, const std::string& reason, char* err, size_t err_len) {
  std::string message;
  if (!WriteSkippedMarker(dir, step, reason, &message)) return Fail(err, err_len, PG_ERROR, reason + "; " + message);
  return Fail(err, err_len, PG_SKIPPED, reason);
}

// The directory whose leftovers this process has removed (guarded by save_mu).
std::string swept_dir;

// The name of one of the agent's free-*.buf files in `dir`, or "" (the writer claims it
// by rename: whoever renames first owns it; a lost race just creates a fresh file).
// The first time a process saves into `dir` it also removes the step-*.tmp files and
// marker temps an earlier process of this rank left (killed in the middle of a save):
// one process saves per rank directory, and this one has no save in flight yet, so they
// are garbage that would hold shared memory.
std::string FindFreeBuffer(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return "";
  const bool sweep = swept_dir != dir;
  std::string found;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    auto ends_with = [&name](const char* suffix) {
      const size_t n = std::strlen(suffix);
      return name.size() > n && name.compare(name.size() - n, n, suffix) == 0;
    };
    if (sweep && name.compare(0, 5, "step-") == 0 && (ends_with(".tmp") || ends_with(".skipped.writing"))) {
      unlink((dir + "/" + name).c_str());
      continue;
    }
    if (!found.empty() || name.size() < 10 || name.compare(0, 5, "free-") != 0 || !ends_with(".buf")) continue;
    found = dir + "/" + name;
    if (!sweep) break;
  }
  closedir(d);
  if (sweep) swept_dir = dir;
  return found;
}

int64_t NowUnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The mode a save runs in: the argument, else PEREGRINE_CHECKPOINT_MODE, else snapshot.
bool ResolveMode(int mode, int* out, std::string* message) {
  if (mode == PG_MODE_COPY || mode == PG_MODE_SNAPSHOT) {
    *out = mode;
    return true;
  }
  if (mode != PG_MODE_DEFAULT) {
    *message = "pg_save_mode: mode " + std::to_string(mode) + " is not PG_MODE_DEFAULT, PG_MODE_COPY or PG_MODE_SNAPSHOT";
    return false;
  }
  const std::string v = Env(kModeEnv);
  if (v.empty() || v == "snapshot") {
    *out = PG_MODE_SNAPSHOT;
  } else if (v == "copy") {
    *out = PG_MODE_COPY;
  } else {
    *message = std::string(kModeEnv) + "=\"" + v + "\" is not \"copy\" or \"snapshot\"";
    return false;
  }
  return true;
}

// Results of snapshot saves reaped but not yet reported by pg_wait (oldest first; the
// oldest are dropped past kMaxUnreported). Guarded by save_mu.
constexpr size_t kMaxUnreported = 64;
std::deque<SnapshotResult> unreported;

// Reaps the snapshot in flight (waiting for it when `block`) into `unreported`.
void ReapLocked(bool block) {
  if (auto r = peregrine::client::ReapSnapshot(block); r.has_value()) {
    if (unreported.size() == kMaxUnreported) unreported.pop_front();
    unreported.push_back(*std::move(r));
  }
}

// True when two segments' bytes overlap in memory (views of one buffer saved twice).
bool SourcesOverlap(const std::vector<ShardRange>& ranges) {
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  for (const ShardRange& r : ranges) {
    if (r.src != nullptr && r.length > 0) {
      const auto lo = reinterpret_cast<uintptr_t>(r.src);
      spans.emplace_back(lo, lo + r.length);
    }
  }
  std::sort(spans.begin(), spans.end());
  uintptr_t end_so_far = 0;  // the furthest end of the spans before (one may hold several)
  for (const auto& [lo, hi] : spans) {
    if (lo < end_so_far) return true;
    end_so_far = std::max(end_so_far, hi);
  }
  return false;
}

int Save(uint64_t step, const void* const* data, const uint64_t* lengths, uint32_t n, int mode_arg, char* err,
         size_t err_len) {
  if (n > 0 && (data == nullptr || lengths == nullptr)) {
    return Fail(err, err_len, PG_ERROR, "pg_save: data and lengths must not be NULL when n_segments > 0");
  }
  if (n > ckpt::kMaxSegments) {
    return Fail(err, err_len, PG_ERROR,
                "pg_save: " + std::to_string(n) + " segments, at most " + std::to_string(ckpt::kMaxSegments) +
                    " (merge small tensors)");
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (lengths[i] > 0 && data[i] == nullptr) {
      return Fail(err, err_len, PG_ERROR, "pg_save: segment " + std::to_string(i) + " has a length but no data");
    }
  }
  const std::string dir = Env(kDirEnv);
  if (dir.empty()) return Fail(err, err_len, PG_NO_AGENT, "no agent store (PEREGRINE_CHECKPOINT_DIR is not set)");

  std::string message;
  int mode = PG_MODE_SNAPSHOT;
  uint64_t rank = 0, world = 1, allowance = UINT64_MAX;
  if (!ResolveMode(mode_arg, &mode, &message) || !EnvU64("RANK", 0, &rank, &message) ||
      !EnvU64("WORLD_SIZE", 1, &world, &message) || !EnvU64(kAllowanceEnv, UINT64_MAX, &allowance, &message)) {
    return Fail(err, err_len, PG_ERROR, message);
  }
  if (rank > UINT32_MAX || world > UINT32_MAX) return Fail(err, err_len, PG_ERROR, "RANK or WORLD_SIZE out of range");
  auto header = ckpt::LayoutShard(step, static_cast<uint32_t>(rank), static_cast<uint32_t>(world), NowUnixNanos(),
                                  std::vector<uint64_t>(lengths, lengths + n));
  if (!header.ok()) return Fail(err, err_len, PG_ERROR, std::string(header.status().message()));
  const uint64_t bytes = ckpt::ShardFileBytes(*header);

  std::lock_guard<std::mutex> lock(save_mu);
  ReapLocked(/*block=*/true);  // at most one snapshot in flight: the previous one ends first
  if (bytes > allowance) {
    return Skip(dir, step,
                "shard of " + std::to_string(bytes) + " bytes is above this rank's allowance of " +
                    std::to_string(allowance) + " bytes",
                err, err_len);
  }
  rlimit fsize{};
  if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && bytes > fsize.rlim_cur) {
    // Growing the file past the limit would raise SIGXFSZ; skip before that.
    return Skip(dir, step,
                "shard of " + std::to_string(bytes) + " bytes is above the file size limit (RLIMIT_FSIZE) of " +
                    std::to_string(fsize.rlim_cur) + " bytes",
                err, err_len);
  }

  ShardPlan plan;
  plan.step = step;
  plan.bytes = bytes;
  plan.dir = dir;
  plan.free_buffer = FindFreeBuffer(dir);
  plan.tmp_path = dir + "/" + ckpt::TempShardFileName(step);
  plan.shard_path = dir + "/" + ckpt::ShardFileName(step);
  plan.marker_path = dir + "/" + ckpt::SkippedMarkerName(step);
  plan.marker_tmp_path = plan.marker_path + ".writing";
  plan.header.resize(ckpt::kShardHeaderBytes);
  ckpt::EncodeShardHeader(*header, absl::MakeSpan(plan.header));
  plan.ranges.reserve(2 * n + 1);
  uint64_t end_of_previous = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const auto& seg = header->segments[i];
    if (seg.offset > end_of_previous) {
      plan.ranges.push_back({ckpt::kShardHeaderBytes + end_of_previous, nullptr, seg.offset - end_of_previous});
    }
    if (seg.length > 0) plan.ranges.push_back({ckpt::kShardHeaderBytes + seg.offset, data[i], seg.length});
    end_of_previous = seg.offset + seg.length;
  }
  if (header->payload_bytes > end_of_previous) {
    plan.ranges.push_back(
        {ckpt::kShardHeaderBytes + end_of_previous, nullptr, header->payload_bytes - end_of_previous});
  }

  if (mode == PG_MODE_SNAPSHOT) {
    plan.release_sources = !SourcesOverlap(plan.ranges);
    std::string why;
    if (peregrine::client::StartSnapshot(plan, &why)) {
      SetError(err, err_len, "");
      return PG_OK;
    }
    // No child (no memory for the page tables, process limit): save by copying instead.
    std::fprintf(stderr, "peregrine: snapshot save of step %" PRIu64 " not possible (%s); copying instead\n", step,
                 why.c_str());
  }
  auto outcome = std::make_unique<WriteOutcome>();
  peregrine::client::WriteShard(plan, /*parallel=*/true, outcome.get());
  return Fail(err, err_len, outcome->code, outcome->message);
}

}  // namespace

struct pg_shard {
  void* map = nullptr;
  size_t bytes = 0;
  ckpt::ShardHeader header;
};

extern "C" {

int pg_available(void) { return Env(kDirEnv).empty() ? 0 : 1; }

uint64_t pg_resume_step(void) {
  uint64_t step = 0;
  return ParseU64(Env(kResumeEnv), &step) ? step : 0;
}

int pg_abi_version(void) { return 1; }

int pg_step(uint64_t step, int has_loss, double loss, const char* const* metric_names, const double* metric_values,
            size_t n_metrics) {
  if (n_metrics > 0 && (metric_names == nullptr || metric_values == nullptr)) return PG_ERROR;
  for (size_t i = 0; i < n_metrics; ++i) {
    const char* name = metric_names[i];
    if (name == nullptr || name[0] == '\0' || std::strpbrk(name, " \t\r\n=") != nullptr) return PG_ERROR;
  }
  std::string line = "[peregrine] step=" + std::to_string(step);
  char buf[64];
  auto number = [&buf](double v) -> const char* {
    if (std::isnan(v)) return "nan";
    std::snprintf(buf, sizeof(buf), "%.9g", v);
    return buf;
  };
  if (has_loss) line += std::string(" loss=") + number(loss);
  for (size_t i = 0; i < n_metrics; ++i) line += std::string(" ") + metric_names[i] + "=" + number(metric_values[i]);
  line += "\n";
  if (std::fputs(line.c_str(), stdout) == EOF || std::fflush(stdout) != 0) return PG_ERROR;
  return PG_OK;
}

int pg_save(uint64_t step, const void* const* data, const uint64_t* lengths, uint32_t n_segments, char* err,
            size_t err_len) {
  return pg_save_mode(step, data, lengths, n_segments, PG_MODE_DEFAULT, err, err_len);
}

int pg_save_mode(uint64_t step, const void* const* data, const uint64_t* lengths, uint32_t n_segments, int mode,
                 char* err, size_t err_len) {
  try {
    return Save(step, data, lengths, n_segments, mode, err, err_len);
  } catch (const std::bad_alloc&) {
    return Fail(err, err_len, PG_ERROR, "pg_save: out of memory");
  } catch (...) {
    return Fail(err, err_len, PG_ERROR, "pg_save: internal error");
  }
}

int pg_wait(int block, uint64_t* step, char* err, size_t err_len) {
  if (step != nullptr) *step = 0;
  try {
    std::lock_guard<std::mutex> lock(save_mu);
    ReapLocked(block != 0);
    if (unreported.empty()) {
      SetError(err, err_len, "");
      return PG_NOT_FOUND;
    }
    const SnapshotResult r = std::move(unreported.front());
    unreported.pop_front();
    if (step != nullptr) *step = r.step;
    return Fail(err, err_len, r.code, r.message);
  } catch (...) {
    return Fail(err, err_len, PG_ERROR, "pg_wait: internal error");
  }
}

int pg_load(uint64_t step, pg_shard** out, char* err, size_t err_len) {
  if (out == nullptr) return Fail(err, err_len, PG_ERROR, "pg_load: out must not be NULL");
  *out = nullptr;
  try {
    {
      // A snapshot of this very step may still be on its way: let it land first.
      std::lock_guard<std::mutex> lock(save_mu);
      ReapLocked(/*block=*/true);
    }
    const std::string dir = Env(kDirEnv);
    if (dir.empty()) return Fail(err, err_len, PG_NO_AGENT, "no agent store (PEREGRINE_CHECKPOINT_DIR is not set)");
    const std::string path = dir + "/" + ckpt::ShardFileName(step);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      if (e == ENOENT) return Fail(err, err_len, PG_NOT_FOUND, "no shard of step " + std::to_string(step) + " in " + dir);
      return Fail(err, err_len, PG_ERROR, "cannot open " + path + ": " + Errno(e));
    }
    struct stat st{};
    if (fstat(fd, &st) != 0) {
      const int e = errno;
      close(fd);
      return Fail(err, err_len, PG_ERROR, "cannot stat " + path + ": " + Errno(e));
    }
    const size_t bytes = static_cast<size_t>(st.st_size);
    if (bytes < ckpt::kShardHeaderBytes) {
      close(fd);
      return Fail(err, err_len, PG_ERROR,
                  path + ": shard truncated: " + std::to_string(bytes) + " bytes, shorter than its header");
    }
    void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);  // one pass, no faults
    const int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) return Fail(err, err_len, PG_ERROR, "cannot map " + path + ": " + Errno(map_errno));
    auto header = ckpt::VerifyShard(absl::MakeConstSpan(static_cast<const uint8_t*>(map), bytes));
    if (!header.ok()) {
      munmap(map, bytes);
      return Fail(err, err_len, PG_ERROR, path + ": " + std::string(header.status().message()));
    }
    if (header->step != step) {
      munmap(map, bytes);
      return Fail(err, err_len, PG_ERROR,
                  path + ": the shard's header says step " + std::to_string(header->step));
    }
    auto* shard = new pg_shard{map, bytes, *std::move(header)};
    *out = shard;
    SetError(err, err_len, "");
    return PG_OK;
  } catch (const std::bad_alloc&) {
    return Fail(err, err_len, PG_ERROR, "pg_load: out of memory");
  } catch (...) {
    return Fail(err, err_len, PG_ERROR, "pg_load: internal error");
  }
}

uint64_t pg_shard_step(const pg_shard* shard) { return shard == nullptr ? 0 : shard->header.step; }

uint32_t pg_shard_segment_count(const pg_shard* shard) {
  return shard == nullptr ? 0 : static_cast<uint32_t>(shard->header.segments.size());
}

const void* pg_shard_segment(const pg_shard* shard, uint32_t i, uint64_t* length) {
  if (length != nullptr) *length = 0;
  if (shard == nullptr || i >= shard->header.segments.size()) return nullptr;
  const auto& seg = shard->header.segments[i];
  if (length != nullptr) *length = seg.length;
  return static_cast<const uint8_t*>(shard->map) + ckpt::kShardHeaderBytes + seg.offset;
}

void pg_shard_close(pg_shard* shard) {
  if (shard == nullptr) return;
  munmap(shard->map, shard->bytes);
  delete shard;
}

}  // extern "C"

namespace {

// At exit (exit() or a return from main; not _exit or a fatal signal) the snapshot in
// flight is waited for, so the process never ends with its last checkpoint half written,
// and a failure nobody asked pg_wait about is said on stderr.
__attribute__((destructor)) void WaitForSnapshotAtExit() {
  std::lock_guard<std::mutex> lock(save_mu);
  ReapLocked(/*block=*/true);
  for (const SnapshotResult& r : unreported) {
    if (r.code != PG_OK) {
      std::fprintf(stderr, "peregrine: the checkpoint of step %" PRIu64 " was not saved: %s\n", r.step,
                   r.message.c_str());
    }
  }
  unreported.clear();
}

}  // namespace
