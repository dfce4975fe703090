#include "cli/analyze/flight_recorder.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/analyze/pickle_reader.h"

// Field names and meanings follow PyTorch's FlightRecorder (dump_dict /
// getCollectiveTrace: the keys "record_id", "pg_id", "process_group", ...). Version "2.x"
// only adds fields from one minor version to the next, so every 2.x is read the same way;
// a field this reader does not know is ignored, one it needs and cannot find skips the
// entry.

namespace peregrine {
namespace {

using Kind = PickleValue::Kind;

constexpr int kMaxNotes = 5;

std::optional<int64_t> IntField(const PickleValue& d, absl::string_view key) {
  const PickleValue* v = d.Find(key);
  if (v == nullptr) return std::nullopt;
  if (v->kind == Kind::kInt) return v->int_value;
  if (v->kind == Kind::kBool) return v->bool_value ? 1 : 0;
  return std::nullopt;
}

std::optional<std::string> StringField(const PickleValue& d, absl::string_view key) {
  const PickleValue* v = d.Find(key);
  if (v == nullptr || v->kind != Kind::kString) return std::nullopt;
  return v->string_value;
}

bool IsSequence(const PickleValue& v) { return v.kind == Kind::kList || v.kind == Kind::kTuple; }

// [[1024], [4, 4]] -> sizes; false when the shape is not a list of lists of ints.
bool ReadSizes(const PickleValue* v, std::vector<std::vector<int64_t>>* out) {
  if (v == nullptr) return true;
  if (!IsSequence(*v)) return false;
  for (const PickleValue& arg : v->items) {
    if (!IsSequence(arg)) return false;
    std::vector<int64_t> dims;
    for (const PickleValue& d : arg.items) {
      if (d.kind != Kind::kInt) return false;
      dims.push_back(d.int_value);
    }
    out->push_back(std::move(dims));
  }
  return true;
}

bool ReadStrings(const PickleValue* v, std::vector<std::string>* out) {
  if (v == nullptr) return true;
  if (!IsSequence(*v)) return false;
  for (const PickleValue& s : v->items) {
    if (s.kind != Kind::kString) return false;
    out->push_back(s.string_value);
  }
  return true;
}

// "[0, 1, 2]" (ranks_str) -> {0, 1, 2}; also accepts a list of ints.
std::vector<int> ParseRanks(const PickleValue* v) {
  std::vector<int> ranks;
  if (v == nullptr) return ranks;
  if (IsSequence(*v)) {
    for (const PickleValue& r : v->items) {
      if (r.kind != Kind::kInt) return {};
      ranks.push_back(static_cast<int>(r.int_value));
    }
    return ranks;
  }
  if (v->kind != Kind::kString) return ranks;
  absl::string_view s = absl::StripAsciiWhitespace(v->string_value);
  if (!absl::ConsumePrefix(&s, "[") || !absl::ConsumeSuffix(&s, "]")) return ranks;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
    int r = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &r)) return {};
    ranks.push_back(r);
  }
  return ranks;
}

// "send 0->1" / "recv 1<-0": group ranks of the source and destination.
void ParseP2p(FrEntry* e, absl::string_view meta) {
  std::pair<absl::string_view, absl::string_view> parts;
  int a = 0, b = 0;
  if (e->op == "send") {
    parts = absl::StrSplit(meta, absl::MaxSplits("->", 1));
    if (absl::SimpleAtoi(parts.first, &a) && absl::SimpleAtoi(parts.second, &b)) {
      e->p2p_src = a;
      e->p2p_dst = b;
    }
  } else if (e->op == "recv") {
    parts = absl::StrSplit(meta, absl::MaxSplits("<-", 1));
    if (absl::SimpleAtoi(parts.first, &a) && absl::SimpleAtoi(parts.second, &b)) {
      e->p2p_dst = a;
      e->p2p_src = b;
    }
  }
}

// One entry; the reason when a needed field is missing or malformed.
std::optional<std::string> ReadEntry(const PickleValue& d, FrEntry* e) {
  if (d.kind != Kind::kDict) return absl::StrCat("is a ", PickleKindName(d.kind), ", not a dict");
  std::optional<std::string> name = StringField(d, "profiling_name");
  if (!name) return std::string("no 'profiling_name' string");
  e->profiling_name = *name;
  absl::string_view op = *name;
  absl::ConsumePrefix(&op, "nccl:");
  const size_t space = op.find(' ');
  e->op = std::string(op.substr(0, space));
  if (e->op.empty()) return absl::StrCat("empty operation in profiling_name '", *name, "'");
  if (space != absl::string_view::npos) ParseP2p(e, op.substr(space + 1));

  std::optional<int64_t> seq = IntField(d, "collective_seq_id");
  if (!seq) return std::string("no 'collective_seq_id' integer");
  e->collective_seq_id = *seq;
  e->p2p_seq_id = IntField(d, "p2p_seq_id").value_or(0);
  e->op_id = IntField(d, "op_id").value_or(0);
  e->record_id = IntField(d, "record_id").value_or(0);

  std::optional<int64_t> pg_id = IntField(d, "pg_id");
  const PickleValue* pg = d.Find("process_group");
  if (pg != nullptr && IsSequence(*pg) && !pg->items.empty() && pg->items[0].kind == Kind::kString) {
    e->pg_name = pg->items[0].string_value;
    if (pg->items.size() > 1 && pg->items[1].kind == Kind::kString) e->pg_desc = pg->items[1].string_value;
  } else if (pg_id) {
    e->pg_name = absl::StrCat(*pg_id);  // older dumps: the uid, which is also the default name
  } else {
    return std::string("neither a 'process_group' (name, desc) nor a 'pg_id'");
  }
  e->pg_id = pg_id.value_or(0);

  std::optional<std::string> state = StringField(d, "state");
  if (!state) return std::string("no 'state' string");
  if (*state == "scheduled") {
    e->state = FrState::kScheduled;
  } else if (*state == "started") {
    e->state = FrState::kStarted;
  } else if (*state == "completed") {
    e->state = FrState::kCompleted;
  } else {
    return absl::StrCat("unknown state '", *state, "' (scheduled, started or completed)");
  }

  if (!ReadSizes(d.Find("input_sizes"), &e->input_sizes)) return std::string("'input_sizes' is not a list of lists of integers");
  if (!ReadSizes(d.Find("output_sizes"), &e->output_sizes)) return std::string("'output_sizes' is not a list of lists of integers");
  if (!ReadStrings(d.Find("input_dtypes"), &e->input_dtypes)) return std::string("'input_dtypes' is not a list of strings");
  if (!ReadStrings(d.Find("output_dtypes"), &e->output_dtypes)) return std::string("'output_dtypes' is not a list of strings");

  e->time_created_ns = IntField(d, "time_created_ns");
  e->time_discovered_started_ns = IntField(d, "time_discovered_started_ns");
  e->time_discovered_completed_ns = IntField(d, "time_discovered_completed_ns");
  e->timeout_ms = IntField(d, "timeout_ms");
  if (const PickleValue* v = d.Find("duration_ms"); v != nullptr && v->kind == Kind::kFloat) e->duration_ms = v->float_value;
  e->retired = IntField(d, "retired").value_or(0) != 0;
  if (std::optional<int64_t> p2p = IntField(d, "is_p2p")) {
    e->is_p2p = *p2p != 0;
  } else {
    e->is_p2p = e->op == "send" || e->op == "recv";
  }
  if (const PickleValue* frames = d.Find("frames"); frames != nullptr && IsSequence(*frames)) {
    for (const PickleValue& f : frames->items) {
      if (f.kind != Kind::kDict) continue;
      e->frames.push_back(FrFrame{StringField(f, "name").value_or(""), StringField(f, "filename").value_or(""),
                                  IntField(f, "line").value_or(0)});
    }
  }
  return std::nullopt;
}

}  // namespace

absl::string_view FrStateName(FrState state) {
  switch (state) {
    case FrState::kScheduled: return "scheduled";
    case FrState::kStarted: return "started";
    case FrState::kCompleted: return "completed";
  }
  return "?";
}

absl::StatusOr<FrDump> ParseFlightRecorderDump(absl::string_view bytes, absl::string_view source) {
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": empty file, not a flight recorder dump"));
  if (static_cast<uint8_t>(bytes[0]) != 0x80) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a pickle (a flight recorder dump starts with the PROTO opcode 0x80, this file with 0x",
        absl::Hex(static_cast<uint8_t>(bytes[0]), absl::kZeroPad2), ")"));
  }
  absl::StatusOr<PickleValue> root = ReadPickle(bytes);
  if (!root.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", root.status().message()));
  if (root->kind != Kind::kDict) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the pickle holds a ", PickleKindName(root->kind), ", not the flight recorder's dict"));
  }
  FrDump dump;
  dump.source = std::string(source);
  std::optional<std::string> version = StringField(*root, "version");
  if (!version) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no 'version' string: not a flight recorder dump"));
  }
  if (!absl::StartsWith(*version, "2.")) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": flight recorder version '", *version,
                                                   "' is not supported (this reader knows 2.x)"));
  }
  dump.version = *version;
  dump.comm_lib_version = StringField(*root, "comm_lib_version").value_or(StringField(*root, "nccl_version").value_or(""));

  if (const PickleValue* config = root->Find("pg_config"); config != nullptr && config->kind == Kind::kDict) {
    for (const auto& [key, value] : config->entries) {
      if (key.kind != Kind::kString || value.kind != Kind::kDict) continue;
      FrGroupConfig c;
      c.name = StringField(value, "name").value_or(key.string_value);
      c.desc = StringField(value, "desc").value_or("");
      c.ranks = ParseRanks(value.Find("ranks"));
      dump.pg_config[c.name] = std::move(c);
    }
  }
  if (const PickleValue* status = root->Find("pg_status"); status != nullptr && status->kind == Kind::kDict) {
    for (const auto& [key, value] : status->entries) {
      if (value.kind != Kind::kDict) continue;
      const std::string id = key.kind == Kind::kString ? key.string_value : absl::StrCat(key.int_value);
      FrGroupStatus s;
      s.last_enqueued = IntField(value, "last_enqueued_collective").value_or(-1);
      s.last_started = IntField(value, "last_started_collective").value_or(-1);
      s.last_completed = IntField(value, "last_completed_collective").value_or(-1);
      dump.pg_status[id] = s;
    }
  }

  const PickleValue* entries = root->Find("entries");
  if (entries == nullptr) {
    dump.notes.push_back("no 'entries': the dump holds no collectives");
    return dump;
  }
  if (!IsSequence(*entries)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": 'entries' is a ", PickleKindName(entries->kind), ", not a list"));
  }
  for (size_t i = 0; i < entries->items.size(); ++i) {
    FrEntry e;
    if (std::optional<std::string> problem = ReadEntry(entries->items[i], &e)) {
      if (++dump.skipped_entries <= kMaxNotes) dump.notes.push_back(absl::StrCat("entry ", i, " skipped: ", *problem));
      continue;
    }
    dump.entries.push_back(std::move(e));
  }
  if (dump.skipped_entries > kMaxNotes) {
    dump.notes.push_back(absl::StrCat("... ", dump.skipped_entries - kMaxNotes, " more entries skipped"));
  }
  return dump;
}

}  // namespace peregrine
