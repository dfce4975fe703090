#include "sim/trainer/train_state.h"

#include <openssl/evp.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace peregrine::sim {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'S', 'I', 'M', 'S', 'T', '1'};
// magic, 8 x u32 (rank, world, tp, pp, dp, hidden, layers, micro-batches),
// 5 x u64 (seed, weight count, step, rng, data position).
constexpr size_t kMetaBytes = 8 + 8 * 4 + 5 * 8;

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// The first field where `saved` differs from `want`, empty when none does.
std::string FirstDifference(const StateShape& saved, const StateShape& want) {
  auto diff = [](const char* name, uint64_t s, uint64_t w) {
    return s == w ? std::string() : absl::StrCat(name, " ", s, " (this run: ", w, ")");
  };
  for (const std::string& d :
       {diff("rank", saved.rank, want.rank), diff("world size", saved.world_size, want.world_size),
        diff("TP", saved.tp, want.tp), diff("PP", saved.pp, want.pp), diff("DP", saved.dp, want.dp),
        diff("hidden", saved.hidden, want.hidden), diff("layers", saved.layers, want.layers),
        diff("micro-batches", saved.micro_batches, want.micro_batches),
        diff("seed", saved.seed, want.seed),
        diff("weight count", saved.weight_count, want.weight_count)}) {
    if (!d.empty()) return d;
  }
  return "";
}

}  // namespace

uint64_t NextRandom(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t InitialDataRng(uint64_t seed, uint32_t dp) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  return mix(seed ^ mix(0x5eed0000ull + dp));
}

std::string EncodeStateMeta(const StateShape& shape, const TrainState& state) {
  std::string out(kMagic, sizeof(kMagic));
  for (uint32_t v : {shape.rank, shape.world_size, shape.tp, shape.pp, shape.dp, shape.hidden,
                     shape.layers, shape.micro_batches}) {
    PutU32(&out, v);
  }
  for (uint64_t v : {shape.seed, shape.weight_count, state.step, state.rng, state.data_position}) {
    PutU64(&out, v);
  }
  return out;
}

absl::StatusOr<TrainState> DecodeTrainState(const StateShape& shape, uint64_t step,
                                            absl::Span<const absl::Span<const uint8_t>> segments) {
  if (segments.size() != 3) {
    return absl::DataLossError(
        absl::StrCat("a sim-trainer state has 3 segments (weights, momentum, meta), found ", segments.size()));
  }
  const absl::Span<const uint8_t> meta = segments[2];
  if (meta.size() != kMetaBytes || std::memcmp(meta.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat("the meta segment is not a sim-trainer state (", meta.size(),
                                            " bytes, want ", kMetaBytes, " starting with PGSIMST1)"));
  }
  const uint8_t* p = meta.data() + sizeof(kMagic);
  StateShape saved;
  uint32_t* fields[] = {&saved.rank, &saved.world_size, &saved.tp, &saved.pp,
                        &saved.dp,   &saved.hidden,     &saved.layers, &saved.micro_batches};
  for (uint32_t* f : fields) {
    *f = static_cast<uint32_t>(Get(p, 4));
    p += 4;
  }
  saved.seed = Get(p, 8);
  saved.weight_count = Get(p + 8, 8);
  TrainState state;
  state.step = Get(p + 16, 8);
  state.rng = Get(p + 24, 8);
  state.data_position = Get(p + 32, 8);
  if (std::string d = FirstDifference(saved, shape); !d.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoint was saved by another run: ", d));
  }
  if (state.step != step) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint of step ", step, " holds the state of step ", state.step));
  }
  const uint64_t bytes = shape.weight_count * sizeof(float);
  for (int i = 0; i < 2; ++i) {
    if (segments[i].size() != bytes) {
      return absl::DataLossError(absl::StrCat(i == 0 ? "weights" : "momentum", " segment holds ",
                                              segments[i].size(), " bytes, want ", bytes));
    }
  }
  state.weights.resize(shape.weight_count);
  state.momentum.resize(shape.weight_count);
  if (bytes > 0) {
    std::memcpy(state.weights.data(), segments[0].data(), bytes);
    std::memcpy(state.momentum.data(), segments[1].data(), bytes);
  }
  return state;
}

std::string WeightDigest(absl::Span<const float> weights) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(weights.data(), weights.size() * sizeof(float), md, &len, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex.push_back(kHex[md[i] >> 4]);
    hex.push_back(kHex[md[i] & 0xf]);
  }
  return hex;
}

}  // namespace peregrine::sim
