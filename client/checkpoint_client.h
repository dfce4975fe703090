// A C++ convenience over the C ABI of libperegrine_client.so (client/peregrine_client.h)
// for C++ trainers: typed segments, messages as std::string, and a loaded shard that
// unmaps itself. Header-only; link the target peregrine::client (the shared library).
//
//   namespace pgc = peregrine::client;
//   if (pgc::ResumeStep() > 0) {
//     pgc::Shard shard;
//     pgc::Result r = pgc::Load(pgc::ResumeStep(), &shard);  // r.ok() or r.message
//     std::span<const std::byte> weights = shard.Segment(0);
//   }
//   pgc::Result r = pgc::Save(step, {pgc::Bytes(weights), pgc::Bytes(momentum)});
//
// Ownership: Save has the segments' bytes before it returns (a snapshot child's image or a
// published copy: the caller may overwrite them at once); a Shard owns its read-only
// mapping (move-only) and its spans are valid while it lives. Thread safety as the C ABI:
// saves are serialised inside the library; a Shard is used by one thread at a time.
// Errors: Result carries the PG_* code and the library's one-line message; nothing throws.
#ifndef PEREGRINE_CLIENT_CHECKPOINT_CLIENT_H_
#define PEREGRINE_CLIENT_CHECKPOINT_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "client/peregrine_client.h"

namespace peregrine::client {

// The outcome of a call: code is PG_OK, PG_SKIPPED, PG_NO_AGENT, PG_NOT_FOUND or
// PG_ERROR; message is the library's reason (empty on PG_OK).
struct Result {
  int code = PG_OK;
  std::string message;
  bool ok() const { return code == PG_OK; }
  bool skipped() const { return code == PG_SKIPPED; }
  bool no_agent() const { return code == PG_NO_AGENT; }
  bool not_found() const { return code == PG_NOT_FOUND; }
};

// The bytes of a contiguous container or object, for Save.
template <typename T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <typename T>
std::span<const std::byte> Bytes(std::span<const T> v) {
  return std::as_bytes(v);
}
inline std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
template <typename T>
std::span<const std::byte> BytesOf(const T& trivially_copyable) {
  return std::as_bytes(std::span<const T>(&trivially_copyable, 1));
}

// True when a store is configured (the process runs under an agent with checkpoints on).
inline bool Available() { return pg_available() != 0; }
// The step to restore (0: a fresh start).
inline uint64_t ResumeStep() { return pg_resume_step(); }

// Prints the progress line "[peregrine] step=<step>[ loss=<loss>] k=v..." and flushes.
inline bool Step(uint64_t step, std::optional<double> loss = std::nullopt,
                 const std::vector<std::pair<std::string, double>>& metrics = {}) {
  std::vector<const char*> names;
  std::vector<double> values;
  for (const auto& [name, value] : metrics) {
    names.push_back(name.c_str());
    values.push_back(value);
  }
  return pg_step(step, loss.has_value() ? 1 : 0, loss.value_or(0.0), names.data(), values.data(), names.size()) ==
         PG_OK;
}

// Saves the segments as this rank's shard of `step` (mode: PG_MODE_*; the default is
// PEREGRINE_CHECKPOINT_MODE, else snapshot). ok(): published in the store (copy) or being
// written by the snapshot child (Wait() reports it);
// skipped(): over the allowance or no room (the agent is told, training goes on);
// no_agent(): nothing to save into; PG_ERROR: see message.
inline Result Save(uint64_t step, std::span<const std::span<const std::byte>> segments, int mode = PG_MODE_DEFAULT) {
  std::vector<const void*> data;
  std::vector<uint64_t> lengths;
  data.reserve(segments.size());
  lengths.reserve(segments.size());
  for (const auto& s : segments) {
    data.push_back(s.data());
    lengths.push_back(s.size());
  }
  char err[512] = {0};
  Result r;
  r.code = pg_save_mode(step, data.data(), lengths.data(), static_cast<uint32_t>(segments.size()), mode, err,
                        sizeof(err));
  if (r.code != PG_OK) r.message = err;
  return r;
}
inline Result Save(uint64_t step, std::initializer_list<std::span<const std::byte>> segments,
                   int mode = PG_MODE_DEFAULT) {
  return Save(step, std::span<const std::span<const std::byte>>(segments.begin(), segments.size()), mode);
}

// Waits for the snapshot save in flight (if any) and reports every snapshot outcome not
// reported yet: ok() when all were published, else the latest failure's code and message
// (`failed_step` gets its step).
inline Result Wait(uint64_t* failed_step = nullptr) {
  Result worst;
  char err[1024] = {0};
  uint64_t step = 0;
  for (int code; (code = pg_wait(1, &step, err, sizeof(err))) != PG_NOT_FOUND;) {
    if (code == PG_OK) continue;
    worst.code = code;
    worst.message = err;
    if (failed_step != nullptr) *failed_step = step;
  }
  return worst;
}

// A verified shard mapped read-only; empty until Load fills it. Move-only.
class Shard {
 public:
  Shard() = default;
  ~Shard() { Reset(); }
  Shard(Shard&& other) noexcept : shard_(std::exchange(other.shard_, nullptr)) {}
  Shard& operator=(Shard&& other) noexcept {
    if (this != &other) {
      Reset();
      shard_ = std::exchange(other.shard_, nullptr);
    }
    return *this;
  }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  bool loaded() const { return shard_ != nullptr; }
  uint64_t step() const { return shard_ == nullptr ? 0 : pg_shard_step(shard_); }
  uint32_t segment_count() const { return shard_ == nullptr ? 0 : pg_shard_segment_count(shard_); }
  // Segment i's bytes (empty when i is out of range or nothing is loaded).
  std::span<const std::byte> Segment(uint32_t i) const {
    if (shard_ == nullptr) return {};
    uint64_t length = 0;
    const void* p = pg_shard_segment(shard_, i, &length);
    if (p == nullptr) return {};
    return {static_cast<const std::byte*>(p), static_cast<size_t>(length)};
  }
  void Reset() {
    if (shard_ != nullptr) pg_shard_close(shard_);
    shard_ = nullptr;
  }

 private:
  friend Result Load(uint64_t step, Shard* out);
  pg_shard* shard_ = nullptr;
};

// Loads this rank's shard of `step` into *out after verifying it. ok(): *out holds it;
// not_found(): no shard of that step; no_agent(): no store; PG_ERROR: corrupt or partial.
inline Result Load(uint64_t step, Shard* out) {
  out->Reset();
  char err[512] = {0};
  Result r;
  r.code = pg_load(step, &out->shard_, err, sizeof(err));
  if (r.code != PG_OK) {
    r.message = err;
    out->shard_ = nullptr;
  }
  return r;
}

}  // namespace peregrine::client

#endif  // PEREGRINE_CLIENT_CHECKPOINT_CLIENT_H_
