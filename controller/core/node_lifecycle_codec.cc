// The node health record as Node metadata (node_lifecycle.h EncodeNodeHealth /
// DecodeNodeHealth). Layout, meant to be read with kubectl:
//   label      peregrine.dev/health               quarantined
//   annotation peregrine.dev/health-since         2024-05-01T12:00:00.5Z
//   annotation peregrine.dev/health-reason        evicted as the culprit: Xid 79 ...
//   annotation peregrine.dev/health-suspect       count=2 first=<time> last=<time>
//   annotation peregrine.dev/health-sweep         kind=full attempts=1 due=<time> started=<time>
//   annotation peregrine.dev/health-sweep-blocked no image: ErrImagePull
//   annotation peregrine.dev/health-failures      <time>,<time>   (oldest first)
// Times are RFC 3339 in UTC with as many fraction digits as the nanoseconds need, so a
// record survives the round trip exactly. The compound annotations are space-separated
// key=value fields; every field is checked and an error names the annotation (and the
// field) so an operator can fix a hand edit.
#include <algorithm>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "controller/core/node_lifecycle.h"

namespace peregrine {
namespace {

constexpr int kMaxBadReadingsText = 1'000'000;
constexpr int kMaxSweepAttempts = 1'000'000'000;
constexpr size_t kMaxQuoted = 64;  // how much of a bad value an error quotes

std::string EncodeTime(int64_t unix_ns) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E*SZ", absl::FromUnixNanos(unix_ns), absl::UTCTimeZone());
}

std::string Quote(absl::string_view text) {
  std::string q = absl::CHexEscape(text.substr(0, kMaxQuoted));
  return absl::StrCat("\"", q, text.size() > kMaxQuoted ? "\"..." : "\"");
}

absl::Status Bad(absl::string_view what, absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, " ", key, ": ", problem));
}
absl::Status BadAnnotation(absl::string_view key, absl::string_view problem) { return Bad("annotation", key, problem); }

// A time after 1970-01-01T00:00:00Z that fits int64 nanoseconds.
absl::StatusOr<int64_t> DecodeTime(absl::string_view key, absl::string_view field, absl::string_view text) {
  const std::string where = field.empty() ? std::string() : absl::StrCat("field ", field, ": ");
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return BadAnnotation(key, absl::StrCat(where, Quote(text), " is not an RFC 3339 time (", error, ")"));
  }
  if (t <= absl::UnixEpoch() || t > absl::FromUnixNanos(std::numeric_limits<int64_t>::max())) {
    return BadAnnotation(key, absl::StrCat(where, Quote(text), " is out of range (after 1970, before 2262-04-11)"));
  }
  return absl::ToUnixNanos(t);
}

absl::StatusOr<int> DecodeCount(absl::string_view key, absl::string_view field, absl::string_view text, int min,
                                int max) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < min || v > max) {
    return BadAnnotation(key, absl::StrCat("field ", field, ": ", Quote(text), " is not an integer in [", min, ", ",
                                           max, "]"));
  }
  return v;
}

// "k1=v1 k2=v2": each key once, only from `allowed`.
absl::StatusOr<std::map<std::string, std::string>> DecodeFields(absl::string_view key, absl::string_view text,
                                                                const std::set<absl::string_view>& allowed) {
  std::map<std::string, std::string> fields;
  for (absl::string_view part : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return BadAnnotation(key, absl::StrCat(Quote(part), " is not key=value"));
    }
    const absl::string_view name = part.substr(0, eq);
    if (!allowed.count(name)) {
      return BadAnnotation(key, absl::StrCat("unknown field ", Quote(name), " (want ",
                                             absl::StrJoin(allowed, ", "), ")"));
    }
    if (!fields.emplace(std::string(name), std::string(part.substr(eq + 1))).second) {
      return BadAnnotation(key, absl::StrCat("field ", name, " given twice"));
    }
  }
  return fields;
}

const std::string* Find(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

absl::Status DecodeSuspect(const std::string& text, NodeHealthRecord& r) {
  const char* key = kNodeHealthSuspectAnnotation;
  absl::StatusOr<std::map<std::string, std::string>> fields = DecodeFields(key, text, {"count", "first", "last"});
  if (!fields.ok()) return fields.status();
  for (const char* f : {"count", "first", "last"}) {
    if (!fields->count(f)) return BadAnnotation(key, absl::StrCat("field ", f, " missing"));
  }
  absl::StatusOr<int> count = DecodeCount(key, "count", fields->at("count"), 1, kMaxBadReadingsText);
  if (!count.ok()) return count.status();
  absl::StatusOr<int64_t> first = DecodeTime(key, "first", fields->at("first"));
  if (!first.ok()) return first.status();
  absl::StatusOr<int64_t> last = DecodeTime(key, "last", fields->at("last"));
  if (!last.ok()) return last.status();
  if (*last < *first) return BadAnnotation(key, "field last is before field first");
  r.bad_readings = *count;
  r.first_bad_at = *first;
  r.last_bad_at = *last;
  return absl::OkStatus();
}

absl::Status DecodeSweep(const std::string& text, NodeHealthRecord& r) {
  const char* key = kNodeHealthSweepAnnotation;
  absl::StatusOr<std::map<std::string, std::string>> fields =
      DecodeFields(key, text, {"attempts", "due", "kind", "started"});
  if (!fields.ok()) return fields.status();
  if (const std::string* kind = Find(*fields, "kind")) {
    if (*kind == "full") {
      r.sweep_kind = SweepKind::kFull;
    } else if (*kind == "short") {
      r.sweep_kind = SweepKind::kShort;
    } else {
      return BadAnnotation(key, absl::StrCat("field kind: ", Quote(*kind), " is not full or short"));
    }
  }
  if (const std::string* attempts = Find(*fields, "attempts")) {
    absl::StatusOr<int> n = DecodeCount(key, "attempts", *attempts, 0, kMaxSweepAttempts);
    if (!n.ok()) return n.status();
    r.sweep_attempts = *n;
  }
  if (const std::string* due = Find(*fields, "due")) {
    absl::StatusOr<int64_t> t = DecodeTime(key, "due", *due);
    if (!t.ok()) return t.status();
    r.sweep_due_at = *t;
  }
  if (const std::string* started = Find(*fields, "started")) {
    absl::StatusOr<int64_t> t = DecodeTime(key, "started", *started);
    if (!t.ok()) return t.status();
    r.sweep_started_at = *t;
  }
  return absl::OkStatus();
}

absl::Status DecodeFailures(const std::string& text, NodeHealthRecord& r) {
  const char* key = kNodeHealthFailuresAnnotation;
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',', absl::SkipWhitespace());
  if (parts.size() > kMaxFailureHistory) {
    return BadAnnotation(key, absl::StrCat(parts.size(), " times, at most ", kMaxFailureHistory, " are kept"));
  }
  for (absl::string_view part : parts) {
    absl::StatusOr<int64_t> t = DecodeTime(key, "", absl::StripAsciiWhitespace(part));
    if (!t.ok()) return t.status();
    if (!r.failures.empty() && *t < r.failures.back()) {
      return BadAnnotation(key, absl::StrCat(Quote(part), " is before the time it follows (want oldest first)"));
    }
    r.failures.push_back(*t);
  }
  return absl::OkStatus();
}

// Fields that must (or must not) be there for the state.
absl::Status CheckState(const NodeHealthRecord& r) {
  const std::string state(NodeHealthName(r.state));
  auto wrong = [&](const char* key, absl::string_view problem) {
    return BadAnnotation(key, absl::StrCat(problem, " (state ", state, ")"));
  };
  const bool suspect = r.state == NodeHealth::kSuspect;
  if (suspect && r.bad_readings == 0) return wrong(kNodeHealthSuspectAnnotation, "missing");
  if (!suspect && r.bad_readings != 0) return wrong(kNodeHealthSuspectAnnotation, "set outside state suspect");
  const bool quarantined = r.state == NodeHealth::kQuarantined;
  const bool sweeping = r.state == NodeHealth::kSweeping;
  if (quarantined && r.sweep_due_at == 0) return wrong(kNodeHealthSweepAnnotation, "field due missing");
  if (!quarantined && r.sweep_due_at != 0) return wrong(kNodeHealthSweepAnnotation, "field due set");
  if (sweeping && (r.sweep_started_at == 0 || r.sweep_attempts < 1)) {
    return wrong(kNodeHealthSweepAnnotation, "fields started and attempts >= 1 needed");
  }
  if (!sweeping && r.sweep_started_at != 0) return wrong(kNodeHealthSweepAnnotation, "field started set");
  if (!quarantined && !sweeping && r.sweep_kind != SweepKind::kFull) {
    return wrong(kNodeHealthSweepAnnotation, "field kind short with no sweep pending or running");
  }
  if (!quarantined && !r.sweep_blocked.empty()) return wrong(kNodeHealthSweepBlockedAnnotation, "set");
  return absl::OkStatus();
}

}  // namespace

NodeHealthMetadata EncodeNodeHealth(const NodeHealthRecord& r) {
  NodeHealthMetadata m;
  m.labels[kNodeHealthLabel] = std::string(NodeHealthName(r.state));
  auto& a = m.annotations;
  auto bounded = [](const std::string& text) {
    if (text.size() <= kMaxNodeHealthReason) return text;
    size_t cut = kMaxNodeHealthReason - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    return absl::StrCat(text.substr(0, cut), "...");
  };
  if (r.since > 0) a[kNodeHealthSinceAnnotation] = EncodeTime(r.since);
  if (!r.reason.empty()) a[kNodeHealthReasonAnnotation] = bounded(r.reason);
  if (r.bad_readings > 0) {
    a[kNodeHealthSuspectAnnotation] = absl::StrCat("count=", r.bad_readings, " first=", EncodeTime(r.first_bad_at),
                                                   " last=", EncodeTime(r.last_bad_at));
  }
  std::vector<std::string> sweep;
  if (r.sweep_kind != SweepKind::kFull || r.sweep_due_at > 0 || r.sweep_started_at > 0 || r.sweep_attempts > 0) {
    sweep.push_back(absl::StrCat("kind=", SweepKindName(r.sweep_kind)));
    sweep.push_back(absl::StrCat("attempts=", r.sweep_attempts));
  }
  if (r.sweep_due_at > 0) sweep.push_back(absl::StrCat("due=", EncodeTime(r.sweep_due_at)));
  if (r.sweep_started_at > 0) sweep.push_back(absl::StrCat("started=", EncodeTime(r.sweep_started_at)));
  if (!sweep.empty()) a[kNodeHealthSweepAnnotation] = absl::StrJoin(sweep, " ");
  if (!r.sweep_blocked.empty()) a[kNodeHealthSweepBlockedAnnotation] = bounded(r.sweep_blocked);
  if (!r.failures.empty()) {
    const size_t skip = r.failures.size() > kMaxFailureHistory ? r.failures.size() - kMaxFailureHistory : 0;
    std::vector<std::string> times;
    for (size_t i = skip; i < r.failures.size(); ++i) times.push_back(EncodeTime(r.failures[i]));
    a[kNodeHealthFailuresAnnotation] = absl::StrJoin(times, ",");
  }
  return m;
}

absl::StatusOr<NodeHealthRecord> DecodeNodeHealth(const std::string& node,
                                                  const std::map<std::string, std::string>& labels,
                                                  const std::map<std::string, std::string>& annotations) {
  NodeHealthRecord r;
  r.node = node;
  const std::string* label = Find(labels, kNodeHealthLabel);
  if (label == nullptr) {
    for (const char* key : kNodeHealthAnnotationKeys) {
      if (annotations.count(key)) {
        return Bad("label", kNodeHealthLabel, absl::StrCat("missing, but annotation ", key, " is set"));
      }
    }
    return r;  // never seen: healthy
  }
  absl::StatusOr<NodeHealth> state = ParseNodeHealth(*label);
  if (!state.ok()) return Bad("label", kNodeHealthLabel, state.status().message());
  r.state = *state;
  if (const std::string* since = Find(annotations, kNodeHealthSinceAnnotation)) {
    absl::StatusOr<int64_t> t = DecodeTime(kNodeHealthSinceAnnotation, "", *since);
    if (!t.ok()) return t.status();
    r.since = *t;
  } else if (r.state != NodeHealth::kHealthy) {
    return BadAnnotation(kNodeHealthSinceAnnotation, absl::StrCat("missing (state ", *label, ")"));
  }
  for (auto [key, field] : {std::pair<const char*, std::string*>{kNodeHealthReasonAnnotation, &r.reason},
                            {kNodeHealthSweepBlockedAnnotation, &r.sweep_blocked}}) {
    const std::string* text = Find(annotations, key);
    if (text == nullptr) continue;
    if (text->size() > kMaxNodeHealthReason) {
      return BadAnnotation(key, absl::StrCat(text->size(), " bytes, at most ", kMaxNodeHealthReason));
    }
    *field = *text;
  }
  if (const std::string* text = Find(annotations, kNodeHealthSuspectAnnotation)) {
    if (absl::Status s = DecodeSuspect(*text, r); !s.ok()) return s;
  }
  if (const std::string* text = Find(annotations, kNodeHealthSweepAnnotation)) {
    if (absl::Status s = DecodeSweep(*text, r); !s.ok()) return s;
  }
  if (const std::string* text = Find(annotations, kNodeHealthFailuresAnnotation)) {
    if (absl::Status s = DecodeFailures(*text, r); !s.ok()) return s;
  }
  if (absl::Status s = CheckState(r); !s.ok()) return s;
  return r;
}

}  // namespace peregrine
