#include "diagnosis/iteration_period.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "diagnosis/check.h"

// How iterations are inferred (Falcon-Detect, section 4.2).
//
// Training repeats the same sequence of collectives every iteration. We encode each call
// by its signature (operation, communicator, element count, datatype), find the recurring
// period with an autocorrelation function (the FIRST lag whose ACF >= 0.95), and measure an
// iteration as the time between a call and its counterpart one period later.
//
// The ACF of a categorical sequence. The paper's ACF is defined on numbers; encoding
// signatures as arbitrary numbers makes unrelated signatures look alike when their codes are
// close. We use the exact categorical version instead: the ACF of the one-hot encoded
// sequence, normalised over the overlap of the sequence and its lag-k shift, which is Cohen's
// kappa between x[0, L-k) and x[k, L):
//     ACF(k) = (match(k) - chance(k)) / (1 - chance(k))
// where match(k) is the fraction of positions t with x[t] == x[t+k] and chance(k) =
// sum_c p_c q_c the agreement expected from the two segments' signature frequencies.
// ACF(k) is 1 for a sequence exactly periodic with period k (or a divisor of k), about 0
// for unrelated segments, and, unlike the biased estimator, does not decay with the lag.
// It is computed lag by lag in increasing order with an early exit at the first lag that
// passes, over lags 1..min(max_lag, L / min_repeats): O(L * period) comparisons.
//
// Robustness (IterationTracker):
//  - warm-up: detection runs on the most recent calls only, and retries on shorter
//    suffixes, so a warm-up prefix with a different pattern does not hide the period;
//  - extra calls (logging, checkpoint barriers): rare signatures are dropped before
//    detection, then the dropped calls that a majority of the periods have at the same place
//    are put back into the pattern (a once-per-iteration call is part of the pattern even
//    when stray calls are more frequent than it); iterations are delimited by matching an
//    anchor (a run of signatures that occurs exactly once per period) and checking that the
//    calls between two anchors contain the period's template as a subsequence, so a few
//    inserted calls neither shift the alignment nor produce wrong samples;
//  - substituted calls (a stray call in place of a pattern call): the ACF tolerates them
//    (0.95), and a span between two anchors may lack up to missing_fraction of the
//    template's calls (fewest insertions and deletions, Myers' O(ND) diff, only when the
//    subsequence check fails);
//  - restarts and reconfiguration: when several consecutive anchor-to-anchor spans fail the
//    template (or no anchor arrives for several periods), the tracker drops the period,
//    reports the break and re-detects on the calls that follow.

namespace peregrine {
namespace {

constexpr size_t kMaxSymbols = std::numeric_limits<CallSymbol>::max();
constexpr int kMaxAnchorLength = 16;
constexpr int kTemplateVotePeriods = 8;
constexpr size_t kChunk = 64;

uint64_t Mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over the running value.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

// Counts positions t < n with a[t] != b[t], stopping (and returning a value > limit) once
// the count exceeds `limit`.
size_t CountMismatches(const CallSymbol* a, const CallSymbol* b, size_t n, size_t limit) {
  size_t mismatches = 0;
  size_t t = 0;
  // Full blocks have a compile-time trip count so that the compiler vectorises them at -O2.
  constexpr size_t kBlock = 128;
  for (; t + kBlock <= n; t += kBlock) {
    uint32_t block = 0;
    for (size_t i = 0; i < kBlock; ++i) block += static_cast<uint32_t>(a[t + i] != b[t + i]);
    mismatches += block;
    if (mismatches > limit) return mismatches;
  }
  for (; t < n; ++t) mismatches += (a[t] != b[t]);
  return mismatches;
}

// Incrementally maintained signature histograms of x[0, L-k) and x[k, L) and their dot
// product, for the chance-agreement term of the categorical ACF.
class LagHistograms {
 public:
  explicit LagHistograms(absl::Span<const CallSymbol> x) : x_(x) {
    CallSymbol max_symbol = 0;
    for (CallSymbol s : x) max_symbol = std::max(max_symbol, s);
    head_.assign(static_cast<size_t>(max_symbol) + 1, 0);
    for (CallSymbol s : x) ++head_[s];
    tail_ = head_;
    for (int64_t c : head_) dot_ += static_cast<double>(c) * static_cast<double>(c);
  }
  // Advances from lag k-1 to lag k (k >= 1).
  void Advance(size_t k) {
    const size_t n = x_.size();
    const CallSymbol leaving_head = x_[n - k];  // x[0, n-k) loses x[n-k]
    dot_ -= static_cast<double>(tail_[leaving_head]);
    --head_[leaving_head];
    const CallSymbol leaving_tail = x_[k - 1];  // x[k, n) loses x[k-1]
    dot_ -= static_cast<double>(head_[leaving_tail]);
    --tail_[leaving_tail];
  }
  // Expected agreement of two independent draws from the current segments.
  double Chance(size_t overlap) const {
    const double n = static_cast<double>(overlap);
    return dot_ / (n * n);
  }

 private:
  absl::Span<const CallSymbol> x_;
  std::vector<int64_t> head_;
  std::vector<int64_t> tail_;
  double dot_ = 0.0;
};

double Kappa(double match, double chance) {
  if (chance >= 1.0 - 1e-12) return match >= 1.0 - 1e-12 ? 1.0 : 0.0;
  return (match - chance) / (1.0 - chance);
}

// The most frequent element of `votes` (the smallest on ties) and its count; votes non-empty.
template <typename T>
std::pair<T, size_t> Majority(std::vector<T> votes) {
  std::sort(votes.begin(), votes.end());
  T best = votes[0];
  size_t best_run = 0;
  for (size_t i = 0; i < votes.size();) {
    size_t j = i;
    while (j < votes.size() && votes[j] == votes[i]) ++j;
    if (j - i > best_run) {
      best_run = j - i;
      best = votes[i];
    }
    i = j;
  }
  return {best, best_run};
}

// Per phase of `period`, the majority symbol of x[base + r * period + phase] over r < reps.
std::vector<CallSymbol> VotePattern(absl::Span<const CallSymbol> x, size_t base, size_t reps,
                                    size_t period) {
  std::vector<CallSymbol> pattern(period);
  std::vector<CallSymbol> votes;
  for (size_t phase = 0; phase < period; ++phase) {
    votes.clear();
    for (size_t r = 0; r < reps; ++r) votes.push_back(x[base + r * period + phase]);
    pattern[phase] = Majority(votes).first;
  }
  return pattern;
}

// `window` filtered to the positions `kept` has the periodic pattern `filtered_pattern`,
// voted over the periods starting at kept-index base, base + p, ... (reps of them). Returns
// the pattern with the dropped calls that a majority of those periods have at the same
// place (between the same two filtered phases) put back in.
std::vector<CallSymbol> ReinstateDroppedCalls(absl::Span<const CallSymbol> window,
                                              absl::Span<const size_t> kept, size_t base,
                                              size_t reps,
                                              absl::Span<const CallSymbol> filtered_pattern) {
  const size_t p = filtered_pattern.size();
  std::vector<CallSymbol> full;
  full.reserve(p);
  std::vector<std::vector<CallSymbol>> slots;
  for (size_t phase = 0; phase < p; ++phase) {
    full.push_back(filtered_pattern[phase]);
    slots.clear();
    for (size_t r = 0; r < reps; ++r) {
      const size_t i = base + r * p + phase;
      if (i + 1 >= kept.size()) continue;  // the window ends before the next kept call
      slots.emplace_back(window.begin() + static_cast<long>(kept[i] + 1),
                         window.begin() + static_cast<long>(kept[i + 1]));
    }
    if (slots.empty()) continue;
    const size_t voters = slots.size();
    auto [content, votes] = Majority(std::move(slots));
    if (!content.empty() && 2 * votes > voters) full.insert(full.end(), content.begin(), content.end());
  }
  return full;
}

// The fewest insertions plus deletions (no substitutions) that turn `a` into `b`, if at most
// `dmax`; -1 otherwise. Myers' O((|a| + |b|) * D) greedy algorithm, tracking the furthest
// point reached on each diagonal with d edits and never leaving the edit grid.
long MinInsertDeleteEdits(absl::Span<const CallSymbol> a, absl::Span<const CallSymbol> b,
                          long dmax) {
  const long n = static_cast<long>(a.size());
  const long m = static_cast<long>(b.size());
  constexpr long kUnreached = std::numeric_limits<long>::min() / 4;
  const long off = dmax + 1;
  std::vector<long> v(static_cast<size_t>(2 * dmax + 3), kUnreached);
  auto at = [&](long k) -> long& { return v[static_cast<size_t>(off + k)]; };
  for (long d = 0; d <= dmax; ++d) {
    for (long k = -d; k <= d; k += 2) {
      long x = kUnreached;
      if (d == 0) {
        x = 0;
      } else {
        // From diagonal k+1 by an insertion (y + 1), or from k-1 by a deletion (x + 1).
        if (k + 1 <= d - 1 && at(k + 1) != kUnreached && at(k + 1) - k <= m) x = at(k + 1);
        if (k - 1 >= -(d - 1) && at(k - 1) != kUnreached && at(k - 1) + 1 <= n) {
          x = std::max(x, at(k - 1) + 1);
        }
      }
      if (x == kUnreached) {
        at(k) = kUnreached;
        continue;
      }
      long y = x - k;
      while (x < n && y < m && a[static_cast<size_t>(x)] == b[static_cast<size_t>(y)]) {
        ++x;
        ++y;
      }
      at(k) = x;
      if (x == n && y == m) return d;
    }
  }
  return -1;
}

}  // namespace

size_t CallSignatureHash::operator()(const CallSignature& s) const {
  uint64_t h = Mix(0, static_cast<uint64_t>(s.op));
  h = Mix(h, s.comm_id);
  h = Mix(h, s.count);
  h = Mix(h, static_cast<uint64_t>(static_cast<uint32_t>(s.datatype)));
  return static_cast<size_t>(h);
}

std::vector<double> CallSequenceAcf(absl::Span<const CallSymbol> symbols, int max_lag) {
  std::vector<double> acf;
  const size_t n = symbols.size();
  if (n < 2 || max_lag < 1) return acf;
  const size_t last = std::min(static_cast<size_t>(max_lag), n - 1);
  LagHistograms hist(symbols);
  acf.reserve(last);
  for (size_t k = 1; k <= last; ++k) {
    hist.Advance(k);
    const size_t overlap = n - k;
    const size_t mismatches =
        CountMismatches(symbols.data(), symbols.data() + k, overlap, overlap);
    const double match = static_cast<double>(overlap - mismatches) / static_cast<double>(overlap);
    acf.push_back(Kappa(match, hist.Chance(overlap)));
  }
  return acf;
}

absl::StatusOr<PeriodEstimate> DetectPeriod(absl::Span<const CallSymbol> symbols,
                                            const PeriodOptions& options) {
  if (!(options.acf_threshold > 0.0 && options.acf_threshold <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("acf_threshold must be in (0, 1], got %g", options.acf_threshold));
  }
  if (options.max_lag < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_lag must be >= 1, got %d", options.max_lag));
  }
  if (options.min_repeats < 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("min_repeats must be >= 2, got %d", options.min_repeats));
  }
  const size_t n = symbols.size();
  const size_t last = std::min(static_cast<size_t>(options.max_lag),
                               n / static_cast<size_t>(options.min_repeats));
  if (last < 1) {
    return absl::NotFoundError(absl::StrFormat(
        "%d calls cannot hold %d repetitions of any period", n, options.min_repeats));
  }
  const double th = options.acf_threshold;
  LagHistograms hist(symbols);
  for (size_t k = 1; k <= last; ++k) {
    hist.Advance(k);
    const size_t overlap = n - k;
    const double chance = hist.Chance(overlap);
    // ACF >= th  <=>  match >= chance + th * (1 - chance).
    const double required = chance + th * (1.0 - chance);
    const double allowed_f = std::floor(static_cast<double>(overlap) * (1.0 - required) + 1e-9);
    const size_t allowed = allowed_f <= 0.0 ? 0 : static_cast<size_t>(allowed_f);
    const size_t mismatches =
        CountMismatches(symbols.data(), symbols.data() + k, overlap, allowed);
    if (mismatches > allowed) continue;
    const double match = static_cast<double>(overlap - mismatches) / static_cast<double>(overlap);
    const double acf = Kappa(match, chance);
    if (acf >= th - 1e-12) return PeriodEstimate{static_cast<int>(k), acf};
  }
  return absl::NotFoundError(absl::StrFormat(
      "no lag in [1, %d] reaches ACF %.3f over %d calls", last, th, n));
}

std::optional<std::vector<size_t>> DropRareSymbols(absl::Span<const CallSymbol> symbols,
                                                   int level, double max_dropped_fraction) {
  std::vector<size_t> kept;
  if (level <= 0) {
    kept.resize(symbols.size());
    for (size_t i = 0; i < symbols.size(); ++i) kept[i] = i;
    return kept;
  }
  CallSymbol max_symbol = 0;
  for (CallSymbol s : symbols) max_symbol = std::max(max_symbol, s);
  std::vector<size_t> counts(static_cast<size_t>(max_symbol) + 1, 0);
  for (CallSymbol s : symbols) ++counts[s];
  std::vector<size_t> distinct;
  for (size_t c : counts) {
    if (c > 0) distinct.push_back(c);
  }
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  // At least one count class must survive.
  if (static_cast<size_t>(level) >= distinct.size()) return std::nullopt;
  const size_t threshold = distinct[static_cast<size_t>(level) - 1];
  size_t dropped = 0;
  for (CallSymbol s : symbols) dropped += counts[s] <= threshold;
  if (static_cast<double>(dropped) > max_dropped_fraction * static_cast<double>(symbols.size())) {
    return std::nullopt;
  }
  kept.reserve(symbols.size() - dropped);
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (counts[symbols[i]] > threshold) kept.push_back(i);
  }
  return kept;
}

absl::StatusOr<std::vector<CallSymbol>> EncodeCallSignatures(
    absl::Span<const NcclCallRecord> calls) {
  std::unordered_map<CallSignature, CallSymbol, CallSignatureHash> codes;
  std::vector<CallSymbol> out;
  out.reserve(calls.size());
  for (const NcclCallRecord& call : calls) {
    auto [it, inserted] = codes.try_emplace(SignatureOf(call), 0);
    if (inserted) {
      if (codes.size() > kMaxSymbols) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "more than %d distinct call signatures in %d calls", kMaxSymbols, calls.size()));
      }
      it->second = static_cast<CallSymbol>(codes.size() - 1);
    }
    out.push_back(it->second);
  }
  return out;
}

absl::StatusOr<IterationTracker> IterationTracker::Create(
    const IterationTrackerOptions& options) {
  auto bad = [](const char* field, double value) {
    return absl::InvalidArgumentError(
        absl::StrFormat("IterationTrackerOptions.%s out of range: %g", field, value));
  };
  const PeriodOptions& p = options.period;
  if (!(p.acf_threshold > 0.0 && p.acf_threshold <= 1.0)) {
    return bad("period.acf_threshold", p.acf_threshold);
  }
  if (p.max_lag < 1) return bad("period.max_lag", p.max_lag);
  if (p.min_repeats < 2) return bad("period.min_repeats", p.min_repeats);
  if (options.window < 16 || static_cast<size_t>(options.window) > kMaxSymbols / 2) {
    return bad("window", options.window);
  }
  if (options.min_calls < 2 * p.min_repeats || options.min_calls > options.window) {
    return bad("min_calls", options.min_calls);
  }
  if (options.retry_interval < 1) return bad("retry_interval", options.retry_interval);
  if (!(options.missing_fraction >= 0.0 && options.missing_fraction < 1.0)) {
    return bad("missing_fraction", options.missing_fraction);
  }
  if (options.max_retry_interval < 1) {
    return bad("max_retry_interval", options.max_retry_interval);
  }
  if (!(options.extra_fraction >= 0.0)) return bad("extra_fraction", options.extra_fraction);
  if (options.extra_slack < 0) return bad("extra_slack", options.extra_slack);
  if (options.break_after < 1) return bad("break_after", options.break_after);
  if (!(options.max_dropped_fraction >= 0.0 && options.max_dropped_fraction < 1.0)) {
    return bad("max_dropped_fraction", options.max_dropped_fraction);
  }
  if (options.max_drop_levels < 0) return bad("max_drop_levels", options.max_drop_levels);
  return IterationTracker(options);
}

CallSymbol IterationTracker::Encode(const CallSignature& signature) {
  auto it = codes_.find(signature);
  if (it != codes_.end()) return it->second;
  if (codes_.size() >= kMaxSymbols) {
    // The code space is exhausted (signatures that keep changing, e.g. variable sizes).
    // Start over with the codes of what is buffered; the pattern, expressed in old codes,
    // cannot be kept.
    if (period_ > 0) Break();
    codes_.clear();
    for (Buffered& b : buffer_) {
      auto [bit, inserted] = codes_.try_emplace(b.signature, 0);
      if (inserted) bit->second = static_cast<CallSymbol>(codes_.size() - 1);
      b.symbol = bit->second;
    }
  }
  const CallSymbol code = static_cast<CallSymbol>(codes_.size());
  codes_.emplace(signature, code);
  // A new signature: the stream changed, so a failed detection is worth retrying soon.
  ResetRetryInterval();
  return code;
}

int IterationTracker::MaxSpanCalls() const {
  return period_ + static_cast<int>(std::ceil(period_ * options_.extra_fraction)) +
         options_.extra_slack;
}

bool IterationTracker::TryDetect() {
  ++stats_.detection_attempts;
  const size_t n = buffer_.size();
  std::vector<size_t> suffixes = {n, n / 2, n / 4};
  size_t previous = 0;
  for (size_t len : suffixes) {
    if (len < static_cast<size_t>(options_.min_calls) || len == previous) continue;
    previous = len;
    std::vector<CallSymbol> window(len);
    for (size_t i = 0; i < len; ++i) window[i] = buffer_[n - len + i].symbol;
    for (int level = 0; level <= options_.max_drop_levels; ++level) {
      std::optional<std::vector<size_t>> kept =
          DropRareSymbols(window, level, options_.max_dropped_fraction);
      if (!kept.has_value()) break;
      std::vector<CallSymbol> filtered(kept->size());
      for (size_t i = 0; i < kept->size(); ++i) filtered[i] = window[(*kept)[i]];
      absl::StatusOr<PeriodEstimate> estimate = DetectPeriod(filtered, options_.period);
      if (!estimate.ok()) continue;
      const int filtered_period = estimate->period;
      // Template: per phase, the majority symbol over the last few periods (aligned to the
      // end of the window), which outvotes a stray call.
      const size_t f = filtered.size();
      const size_t reps =
          std::min<size_t>(kTemplateVotePeriods, f / static_cast<size_t>(filtered_period));
      const size_t base = f - reps * static_cast<size_t>(filtered_period);
      std::vector<CallSymbol> pattern =
          VotePattern(filtered, base, reps, static_cast<size_t>(filtered_period));
      if (level > 0) {
        // The filter dropped signatures by rarity; some of them may still be pattern calls
        // (a call made once per iteration is rarer than stray calls inserted several times
        // per iteration). Between two consecutive phases of the filtered pattern, take the
        // dropped calls each period had there; a sequence that a majority of the periods
        // share belongs to the pattern and is put back at that place.
        pattern = ReinstateDroppedCalls(window, *kept, base, reps, pattern);
      }
      const int p = static_cast<int>(pattern.size());
      // Anchor: the shortest cyclic m-gram that occurs exactly once per period.
      int anchor_start = -1;
      int anchor_len = 0;
      for (int m = 1; m <= std::min(p, kMaxAnchorLength) && anchor_start < 0; ++m) {
        for (int j = 0; j < p && anchor_start < 0; ++j) {
          bool unique = true;
          for (int other = 0; other < p && unique; ++other) {
            if (other == j) continue;
            bool same = true;
            for (int q = 0; q < m && same; ++q) {
              same = pattern[static_cast<size_t>((j + q) % p)] ==
                     pattern[static_cast<size_t>((other + q) % p)];
            }
            unique = !same;
          }
          if (unique) {
            anchor_start = j;
            anchor_len = m;
          }
        }
      }
      if (anchor_start < 0) continue;
      template_.resize(static_cast<size_t>(p));
      for (int i = 0; i < p; ++i) {
        template_[static_cast<size_t>(i)] = pattern[static_cast<size_t>((anchor_start + i) % p)];
      }
      in_template_.assign(kMaxSymbols + 1, 0);
      for (CallSymbol s : template_) in_template_[s] = 1;
      period_ = p;
      anchor_len_ = anchor_len;
      ++epoch_;
      ++stats_.detections;
      scan_from_ = 0;
      recent_.clear();
      last_anchor_ = -1;
      calls_since_anchor_ = 0;
      consecutive_rejects_ = 0;
      detected_at_position_ = next_position_;
      return true;
    }
  }
  return false;
}

void IterationTracker::Break() {
  ++stats_.breaks;
  period_ = 0;
  template_.clear();
  in_template_.clear();
  recent_.clear();
  anchor_len_ = 0;
  // Calls before the last good anchor belong to the old pattern's verified iterations.
  if (last_anchor_ > 0) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + last_anchor_);
  }
  last_anchor_ = -1;
  scan_from_ = 0;
  calls_since_anchor_ = 0;
  consecutive_rejects_ = 0;
  attempt_pending_ = true;
  calls_since_attempt_ = 0;
  ResetRetryInterval();
}

void IterationTracker::Scan(std::vector<IterationSample>& out) {
  PEREGRINE_CHECK(period_ > 0) << "Scan without a pattern";
  const long limit = static_cast<long>(options_.break_after) * MaxSpanCalls();
  const size_t allowed_extra = static_cast<size_t>(MaxSpanCalls() - period_);
  const size_t allowed_missing = static_cast<size_t>(
      std::floor(static_cast<double>(period_) * options_.missing_fraction + 1e-9));
  for (size_t i = scan_from_; i < buffer_.size(); ++i) {
    const CallSymbol s = buffer_[i].symbol;
    // Every call since the last anchor counts towards the break limit (a new pattern may
    // use none of the old signatures); before the first anchor, only calls that arrived
    // after detection count (the buffer may open with a long warm-up).
    if (last_anchor_ >= 0 || buffer_[i].position >= detected_at_position_) {
      ++calls_since_anchor_;
    }
    if (calls_since_anchor_ > limit) {
      Break();
      return;
    }
    if (!in_template_[s]) continue;
    recent_.push_back(i);
    if (recent_.size() > static_cast<size_t>(anchor_len_)) recent_.erase(recent_.begin());
    bool is_anchor = recent_.size() == static_cast<size_t>(anchor_len_);
    for (int q = 0; q < anchor_len_ && is_anchor; ++q) {
      is_anchor = buffer_[recent_[static_cast<size_t>(q)]].symbol == template_[static_cast<size_t>(q)];
    }
    if (is_anchor) {
      const size_t a = recent_[0];
      if (last_anchor_ >= 0) {
        // The span [last_anchor_, a) must contain the template as a subsequence with few
        // extra template-symbol calls.
        // Fast path: the template is a subsequence (nothing missing). Otherwise a few
        // template calls may be missing (substituted by other calls): the fewest
        // insertions and deletions that turn the template into the span's template-symbol
        // calls tell how many are missing and how many are extra.
        size_t matched = 0;
        size_t extra_template_calls = 0;
        span_symbols_.clear();
        for (size_t k = static_cast<size_t>(last_anchor_); k < a; ++k) {
          const CallSymbol sym = buffer_[k].symbol;
          if (!in_template_[sym]) continue;
          span_symbols_.push_back(sym);
          if (matched < template_.size() && sym == template_[matched]) {
            ++matched;
          } else {
            ++extra_template_calls;
          }
        }
        size_t missing = 0;
        bool accepted = matched == template_.size() && extra_template_calls <= allowed_extra;
        if (!accepted && allowed_missing > 0) {
          const long n = static_cast<long>(template_.size());
          const long m = static_cast<long>(span_symbols_.size());
          // deletions = (D - (m - n)) / 2 <= allowed_missing, insertions = (D + (m - n)) / 2
          // <= allowed_extra.
          const long dmax = std::min(2 * static_cast<long>(allowed_missing) + (m - n),
                                     2 * static_cast<long>(allowed_extra) - (m - n));
          const long d = dmax < 0 ? -1 : MinInsertDeleteEdits(template_, span_symbols_, dmax);
          if (d >= 0) {
            accepted = true;
            missing = static_cast<size_t>((d - (m - n)) / 2);
          }
        }
        if (accepted) {
          consecutive_rejects_ = 0;
          const Buffered& begin = buffer_[static_cast<size_t>(last_anchor_)];
          const Buffered& end = buffer_[a];
          if (end.position + 1 > last_emitted_end_) {
            IterationSample sample;
            sample.start_ns = begin.enter_ns;
            sample.end_ns = end.enter_ns;
            sample.duration_ns = end.enter_ns - begin.enter_ns;
            sample.end_call = end.position;
            sample.period = period_;
            sample.extra_calls = static_cast<int>(a - static_cast<size_t>(last_anchor_)) -
                                 (period_ - static_cast<int>(missing));
            sample.pattern_epoch = epoch_;
            out.push_back(sample);
            ++stats_.samples;
            last_emitted_end_ = end.position + 1;
          }
        } else {
          ++stats_.rejected_spans;
          if (++consecutive_rejects_ >= options_.break_after) {
            last_anchor_ = static_cast<long>(a);
            Break();
            return;
          }
        }
      }
      last_anchor_ = static_cast<long>(a);
      calls_since_anchor_ = static_cast<long>(i - a + 1);
    }
  }
  scan_from_ = buffer_.size();
}

void IterationTracker::TrimBuffer() {
  size_t drop = 0;
  if (period_ > 0 && last_anchor_ > 0) drop = static_cast<size_t>(last_anchor_);
  if (buffer_.size() - drop > static_cast<size_t>(options_.window)) {
    drop = buffer_.size() - static_cast<size_t>(options_.window);
  }
  if (drop == 0) return;
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<long>(drop));
  scan_from_ = scan_from_ > drop ? scan_from_ - drop : 0;
  if (last_anchor_ >= 0) {
    last_anchor_ = last_anchor_ >= static_cast<long>(drop) ? last_anchor_ - static_cast<long>(drop) : -1;
  }
  std::vector<size_t> kept;
  for (size_t r : recent_) {
    if (r >= drop) kept.push_back(r - drop);
  }
  recent_ = std::move(kept);
}

std::vector<IterationSample> IterationTracker::Add(absl::Span<const NcclCallRecord> calls) {
  std::vector<IterationSample> out;
  for (size_t begin = 0; begin < calls.size(); begin += kChunk) {
    const size_t end = std::min(calls.size(), begin + kChunk);
    for (size_t i = begin; i < end; ++i) {
      const CallSignature signature = SignatureOf(calls[i]);
      const CallSymbol symbol = Encode(signature);
      buffer_.push_back(Buffered{signature, symbol, calls[i].enter_ns, next_position_++});
      ++stats_.calls;
      ++calls_since_attempt_;
    }
    // A scan can break the pattern and a detection can establish a new one over calls that
    // are already buffered, so alternate until neither makes progress.
    for (int round = 0; round < 4; ++round) {
      if (period_ > 0) Scan(out);
      if (period_ > 0) break;
      const bool due = attempt_pending_ || calls_since_attempt_ >= current_retry_interval_;
      if (!due || buffer_.size() < static_cast<size_t>(options_.min_calls)) break;
      attempt_pending_ = false;
      calls_since_attempt_ = 0;
      if (!TryDetect()) {
        // Back off: the same calls, a little older, rarely give a different answer.
        const uint64_t cap = static_cast<uint64_t>(
            std::max(options_.max_retry_interval, options_.retry_interval));
        current_retry_interval_ = std::min(cap, 2 * current_retry_interval_);
        break;
      }
      ResetRetryInterval();
    }
    TrimBuffer();
  }
  return out;
}

absl::StatusOr<std::vector<IterationSample>> InferIterationTimes(
    absl::Span<const NcclCallRecord> calls, const IterationTrackerOptions& options) {
  absl::StatusOr<IterationTracker> tracker = IterationTracker::Create(options);
  if (!tracker.ok()) return tracker.status();
  return tracker->Add(calls);
}

}  // namespace peregrine
