#include "tests/fakes/fake_kube_api_server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace peregrine::testing {
namespace {

using json = nlohmann::json;

constexpr char kModified[] =
    "the object has been modified; please apply your changes to the latest version and try "
    "again";

// ---------------------------------------------------------------------------------------
// Replies: every error is a metav1.Status with the real server's code, reason, message.

struct Reply {
  int code = 200;
  json body;
};

std::string ReasonForCode(int code) {
  static const std::map<int, std::string> kReasons = {
      {400, "BadRequest"},         {401, "Unauthorized"},
      {403, "Forbidden"},          {404, "NotFound"},
      {405, "MethodNotAllowed"},   {409, "Conflict"},
      {410, "Expired"},            {415, "UnsupportedMediaType"},
      {422, "Invalid"},            {429, "TooManyRequests"},
      {500, "InternalError"},      {503, "ServiceUnavailable"},
      {504, "Timeout"}};
  auto it = kReasons.find(code);
  return it == kReasons.end() ? "" : it->second;
}

json StatusObject(int code, absl::string_view reason, absl::string_view message, json details) {
  json s = {{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", json::object()},
            {"status", "Failure"}, {"message", message}, {"reason", reason}, {"code", code}};
  if (!details.is_null()) s["details"] = std::move(details);
  return s;
}

Reply Fail(int code, absl::string_view message, json details = nullptr,
           absl::string_view reason = "") {
  return {code, StatusObject(code, reason.empty() ? ReasonForCode(code) : std::string(reason),
                             message, std::move(details))};
}

json Details(const KubeResourceType& type, absl::string_view name) {
  json d = {{"name", name}, {"kind", type.plural}};
  if (!type.group.empty()) d["group"] = type.group;
  return d;
}

Reply NotFound(const KubeResourceType& type, absl::string_view name) {
  return Fail(404, absl::StrFormat("%s \"%s\" not found", type.QualifiedName(), name),
              Details(type, name));
}

Reply Conflict(const KubeResourceType& type, absl::string_view name, absl::string_view why) {
  return Fail(409,
              absl::StrFormat("Operation cannot be fulfilled on %s \"%s\": %s",
                              type.QualifiedName(), name, why),
              Details(type, name));
}

Reply Invalid(const KubeResourceType& type, absl::string_view name, absl::string_view why) {
  json details = Details(type, name);
  details["kind"] = type.kind;
  return Fail(422, absl::StrFormat("%s \"%s\" is invalid: %s", type.kind, name, why), details);
}

Reply TooLargeVersion(int64_t asked, int64_t current) {
  return Fail(504, absl::StrFormat("Too large resource version: %d, current: %d", asked, current),
              json{{"causes", {{{"reason", "ResourceVersionTooLarge"},
                                {"message", "Too large resource version"}}}},
                   {"retryAfterSeconds", 1}});
}

Reply TooOldVersion(int64_t asked, int64_t oldest) {
  return Fail(410, absl::StrFormat("too old resource version: %d (%d)", asked, oldest));
}

// ---------------------------------------------------------------------------------------
// Object helpers.

std::string ApiVersion(const KubeResourceType& type) {
  return type.group.empty() ? type.version : absl::StrCat(type.group, "/", type.version);
}

const json* MetaField(const json& obj, const char* field) {
  if (!obj.is_object()) return nullptr;
  auto meta = obj.find("metadata");
  if (meta == obj.end() || !meta->is_object()) return nullptr;
  auto it = meta->find(field);
  return it == meta->end() || it->is_null() ? nullptr : &*it;
}

std::string MetaString(const json& obj, const char* field) {
  const json* f = MetaField(obj, field);
  return f != nullptr && f->is_string() ? f->get<std::string>() : "";
}

bool Deleting(const json& obj) { return MetaField(obj, "deletionTimestamp") != nullptr; }

std::vector<std::string> Finalizers(const json& obj) {
  std::vector<std::string> out;
  if (const json* f = MetaField(obj, "finalizers"); f != nullptr && f->is_array()) {
    for (const json& v : *f) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
  }
  return out;
}

bool HasFinalizer(const json& obj, absl::string_view name) {
  auto f = Finalizers(obj);
  return std::find(f.begin(), f.end(), name) != f.end();
}

void SetFinalizers(json& obj, const std::vector<std::string>& finalizers) {
  if (finalizers.empty()) {
    obj["metadata"].erase("finalizers");
  } else {
    obj["metadata"]["finalizers"] = finalizers;
  }
}

json OwnerRefs(const json& obj) {
  const json* refs = MetaField(obj, "ownerReferences");
  return refs != nullptr && refs->is_array() ? *refs : json::array();
}

// The object without metadata (and without status where status is a subresource): a
// change here is a spec change, which bumps metadata.generation.
bool SpecChanged(json a, json b, bool ignore_status) {
  for (json* o : {&a, &b}) {
    o->erase("metadata");
    if (ignore_status) o->erase("status");
  }
  return a != b;
}

std::string Timestamp() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

// RFC 1123 subdomain, the rule for most object names.
bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.')) return false;
  }
  return absl::ascii_isalnum(name.front()) && absl::ascii_isalnum(name.back());
}

std::string StoreKey(absl::string_view ns, absl::string_view name) {
  return absl::StrCat(ns, "/", name);
}

bool InNamespace(absl::string_view key, absl::string_view ns) {
  return ns.empty() || absl::StartsWith(key, absl::StrCat(ns, "/"));
}

// ---------------------------------------------------------------------------------------
// Label and field selectors.

bool ValidLabelPart(absl::string_view s, size_t max, bool allow_slash) {
  if (s.size() > max) return false;
  for (char c : s) {
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || (allow_slash && c == '/')))
      return false;
  }
  return s.empty() || (absl::ascii_isalnum(s.front()) && absl::ascii_isalnum(s.back()));
}

struct LabelRequirement {
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  std::string key;
  Op op;
  std::vector<std::string> values;
};

absl::StatusOr<std::vector<LabelRequirement>> ParseLabelSelector(absl::string_view text) {
  std::vector<LabelRequirement> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  std::vector<std::string> terms(1);
  int depth = 0;
  for (char c : text) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth < 0 || depth > 1) return absl::InvalidArgumentError("unbalanced parentheses");
    if (c == ',' && depth == 0) {
      terms.emplace_back();
    } else {
      terms.back() += c;
    }
  }
  if (depth != 0) return absl::InvalidArgumentError("unbalanced parentheses");
  using Op = LabelRequirement::Op;
  for (const std::string& raw : terms) {
    absl::string_view t = absl::StripAsciiWhitespace(raw);
    auto bad = absl::InvalidArgumentError(absl::StrCat("unable to parse requirement: \"", t, "\""));
    LabelRequirement r;
    size_t pos;
    if (absl::StartsWith(t, "!")) {
      r = {std::string(absl::StripAsciiWhitespace(t.substr(1))), Op::kDoesNotExist, {}};
    } else if ((pos = t.find('(')) != absl::string_view::npos) {
      if (!absl::EndsWith(t, ")")) return bad;
      std::vector<std::string> head =
          absl::StrSplit(t.substr(0, pos), absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (head.size() != 2 || (head[1] != "in" && head[1] != "notin")) return bad;
      r = {head[0], head[1] == "in" ? Op::kIn : Op::kNotIn, {}};
      for (absl::string_view v : absl::StrSplit(t.substr(pos + 1, t.size() - pos - 2), ',')) {
        r.values.emplace_back(absl::StripAsciiWhitespace(v));
      }
    } else if ((pos = t.find("!=")) != absl::string_view::npos) {
      r = {std::string(absl::StripAsciiWhitespace(t.substr(0, pos))), Op::kNotEquals,
           {std::string(absl::StripAsciiWhitespace(t.substr(pos + 2)))}};
    } else if ((pos = t.find('=')) != absl::string_view::npos) {
      size_t skip = t.substr(pos, 2) == "==" ? 2 : 1;
      r = {std::string(absl::StripAsciiWhitespace(t.substr(0, pos))), Op::kEquals,
           {std::string(absl::StripAsciiWhitespace(t.substr(pos + skip)))}};
    } else {
      r = {std::string(t), Op::kExists, {}};
    }
    if (r.key.empty() || !ValidLabelPart(r.key, 317, /*allow_slash=*/true)) return bad;
    for (const std::string& v : r.values) {
      if (!ValidLabelPart(v, 63, /*allow_slash=*/false)) return bad;
    }
    out.push_back(std::move(r));
  }
  return out;
}

struct FieldRequirement {
  std::vector<std::string> path;
  bool equals;
  std::string value;
};

absl::StatusOr<std::vector<FieldRequirement>> ParseFieldSelector(absl::string_view text,
                                                                 const KubeResourceType& type) {
  std::vector<FieldRequirement> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view t : absl::StrSplit(text, ',')) {
    size_t pos = t.find('=');
    if (pos == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid selector: '", t, "'"));
    }
    bool negated = pos > 0 && t[pos - 1] == '!';
    std::string field(absl::StripAsciiWhitespace(t.substr(0, negated ? pos - 1 : pos)));
    size_t value_at = pos + (!negated && t.substr(pos, 2) == "==" ? 2 : 1);
    const auto& extra = type.selectable_fields;
    if (field != "metadata.name" && field != "metadata.namespace" &&
        std::find(extra.begin(), extra.end(), field) == extra.end()) {
      return absl::InvalidArgumentError(absl::StrCat("field label not supported: ", field));
    }
    std::vector<std::string> path = absl::StrSplit(field, '.');
    out.push_back({std::move(path), !negated,
                   std::string(absl::StripAsciiWhitespace(t.substr(value_at)))});
  }
  return out;
}

struct Selector {
  std::vector<LabelRequirement> labels;
  std::vector<FieldRequirement> fields;

  bool Matches(const json& obj) const {
    const json* all = MetaField(obj, "labels");
    for (const LabelRequirement& r : labels) {
      std::optional<std::string> v;
      if (all != nullptr && all->is_object() && all->contains(r.key) && (*all)[r.key].is_string()) {
        v = (*all)[r.key].get<std::string>();
      }
      bool listed = v && std::find(r.values.begin(), r.values.end(), *v) != r.values.end();
      using Op = LabelRequirement::Op;
      bool ok = r.op == Op::kEquals      ? v && *v == r.values[0]
                : r.op == Op::kNotEquals ? !v || *v != r.values[0]
                : r.op == Op::kIn        ? listed
                : r.op == Op::kNotIn     ? !listed
                : r.op == Op::kExists    ? v.has_value()
                                         : !v.has_value();
      if (!ok) return false;
    }
    for (const FieldRequirement& f : fields) {
      const json* node = &obj;
      for (const std::string& part : f.path) {
        node = node->is_object() && node->contains(part) ? &(*node)[part] : nullptr;
        if (node == nullptr) break;
      }
      std::string v = node == nullptr || node->is_null() ? ""
                      : node->is_string()                ? node->get<std::string>()
                                                         : node->dump();
      if ((v == f.value) != f.equals) return false;
    }
    return true;
  }
};

absl::StatusOr<Selector> ParseSelector(const httplib::Request& req, const KubeResourceType& type) {
  Selector s;
  auto labels = ParseLabelSelector(req.get_param_value("labelSelector"));
  if (!labels.ok()) return labels.status();
  auto fields = ParseFieldSelector(req.get_param_value("fieldSelector"), type);
  if (!fields.ok()) return fields.status();
  s.labels = *std::move(labels);
  s.fields = *std::move(fields);
  return s;
}

bool ParamTrue(const httplib::Request& req, const char* name) {
  std::string v = req.get_param_value(name);
  return v == "true" || v == "1";
}

// What a request addresses, resolved from its path.
struct Target {
  KubeResourceType type;
  std::string ns;
  std::string name;
  bool status = false;
};

}  // namespace

std::string KubeResourceType::QualifiedName() const {
  return group.empty() ? plural : absl::StrCat(plural, ".", group);
}

// ---------------------------------------------------------------------------------------

class FakeKubeApiServer::Impl {
 public:
  explicit Impl(FakeKubeApiServerOptions options) : options_(options), rng_(options.seed) {}
  ~Impl() { Stop(); }

  absl::Status Start();
  void Stop();
  int port() const { return port_; }

  absl::StatusOr<json> Get(absl::string_view resource, absl::string_view ns,
                           absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<json> Create(absl::string_view resource, absl::string_view ns, json object)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `whole`: mutate edits the whole object (its server metadata kept), else its .status.
  absl::Status MutateStatus(absl::string_view resource, absl::string_view ns, absl::string_view name,
                            const std::function<void(json&)>& mutate, bool whole = false) ABSL_LOCKS_EXCLUDED(mu_);

  // The simple test hooks below lock mu_ themselves, so the rest is public to the
  // FakeKubeApiServer methods in this file (Impl itself is private to it).
  // One committed write, kept for watches and exact-version lists. `prev` is the
  // object before the write (null for ADDED); DELETED carries the final object.
  struct HistoryEntry {
    int64_t rv;
    std::string resource;
    std::string key;
    std::string type;
    json object;
    json prev;
  };
  struct WatchState {
    KubeResourceType type;
    std::string ns;
    Selector selector;
    bool started = false;
    bool initial_events = false;    // synthetic ADDED for the current state first
    bool initial_end_mark = false;  // then a BOOKMARK marking their end
    bool bookmarks = false;
    int64_t next_rv = 0;  // every event at or before this one has been handled
    absl::Time deadline;
    absl::Time next_bookmark;
    int64_t bookmark_epoch = 0;
    int64_t drop_epoch = 0;
  };
  struct FailureRule {
    std::string verb;
    std::string resource;
    int remaining;
    int code;
  };

  void Serve(const httplib::Request& req, httplib::Response& res) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Target> ResolveLocked(absl::string_view path) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const KubeResourceType* TypeByNameLocked(absl::string_view qualified) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply GetLocked(const Target& t, const httplib::Request& req) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply ListLocked(const Target& t, const httplib::Request& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply CreateLocked(const Target& t, json obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply UpdateLocked(const Target& t, json obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply PatchLocked(const Target& t, const httplib::Request& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply DeleteLocked(const Target& t, const httplib::Request& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Reply DeleteCollectionLocked(const Target& t, const httplib::Request& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::optional<Reply> StartWatchLocked(const Target& t, const httplib::Request& req,
                                        httplib::Response& res) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WatchStep(WatchState& st, httplib::DataSink& sink) ABSL_LOCKS_EXCLUDED(mu_);
  void CollectEventsLocked(WatchState& st, std::string& out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Commits one write: bumps the global resourceVersion, stores it, records history.
  json CommitLocked(const KubeResourceType& type, const std::string& key, const char* event,
                    json obj, json prev) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores an updated object; one being deleted whose finalizers are gone is deleted.
  json WriteLocked(const KubeResourceType& type, const std::string& key, json obj, json prev)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes now, or marks deletionTimestamp while finalizers remain.
  json DeleteObjectLocked(const KubeResourceType& type, const std::string& key,
                          absl::string_view policy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CollectGarbageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, json> SnapshotLocked(const std::string& resource, int64_t rv) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewUidLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NameSuffixLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FakeKubeApiServerOptions options_;
  std::unique_ptr<httplib::Server> server_;  // set by Start(), then read-only
  std::thread listener_;
  std::atomic<int> port_{0};

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every write, drop, bookmark request and Stop
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, KubeResourceType> types_ ABSL_GUARDED_BY(mu_);  // "group/plural"
  // Qualified resource name -> "namespace/name" -> object; ordered like etcd keys.
  std::map<std::string, std::map<std::string, json>> objects_ ABSL_GUARDED_BY(mu_);
  std::deque<HistoryEntry> history_ ABSL_GUARDED_BY(mu_);
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t compacted_rv_ ABSL_GUARDED_BY(mu_) = 0;  // history holds every write after it
  bool gc_pending_ ABSL_GUARDED_BY(mu_) = false;
  // uid -> (qualified resource, store key) of every stored object.
  absl::flat_hash_map<std::string, std::pair<std::string, std::string>> uid_index_ ABSL_GUARDED_BY(mu_);
  // The object with this uid exists and is not being deleted.
  bool LiveOwnerLocked(const std::string& uid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = uid_index_.find(uid);
    if (it == uid_index_.end()) return false;
    auto store = objects_.find(it->second.first);
    if (store == objects_.end()) return false;
    auto obj = store->second.find(it->second.second);
    return obj != store->second.end() && !Deleting(obj->second);
  }
  int64_t drop_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bookmark_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int open_watches_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<FailureRule> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<FailureRule> interleaves_ ABSL_GUARDED_BY(mu_);  // code unused
  int interleaved_writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::vector<std::string>> delete_log_ ABSL_GUARDED_BY(mu_);  // resource -> names
  std::map<std::pair<std::string, std::string>, int> request_counts_ ABSL_GUARDED_BY(mu_);
  std::string last_authorization_ ABSL_GUARDED_BY(mu_);
  FakeKubeApiServer::WriteHook write_hook_ ABSL_GUARDED_BY(mu_);
  FakeKubeApiServer::WriteObserver write_observer_ ABSL_GUARDED_BY(mu_);
  FakeKubeAuth auth_;  // thread-safe on its own
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

absl::Status FakeKubeApiServer::Impl::Start() {
  if (server_ != nullptr) return absl::FailedPreconditionError("server already started");
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [n = options_.worker_threads] {
    return new httplib::ThreadPool(static_cast<size_t>(n));
  };
  server_->set_keep_alive_timeout(1);  // bounds how long Stop() waits on idle connections
  // As the real API server (Go's net/http sets TCP_NODELAY): without it a response whose
  // headers and body go out in two writes waits for the client's delayed ACK (~40 ms).
  server_->set_tcp_nodelay(true);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { Serve(req, res); };
  server_->Get(".*", handler);
  server_->Post(".*", handler);
  server_->Put(".*", handler);
  server_->Patch(".*", handler);
  server_->Delete(".*", handler);
  int port = server_->bind_to_any_port("127.0.0.1");
  if (port <= 0) return absl::UnavailableError("cannot bind 127.0.0.1 to a free port");
  port_ = port;
  listener_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() only takes effect once the accept loop runs.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!server_->is_running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("HTTP accept loop did not start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void FakeKubeApiServer::Impl::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  if (server_ != nullptr) server_->stop();
  if (listener_.joinable()) listener_.join();
}

// ---------------------------------------------------------------------------------------
// Routing.

absl::StatusOr<Target> FakeKubeApiServer::Impl::ResolveLocked(absl::string_view path) const {
  std::vector<std::string> seg = absl::StrSplit(path, '/', absl::SkipEmpty());
  auto not_found = absl::NotFoundError("the server could not find the requested resource");
  std::string group, version;
  size_t i;
  if (seg.size() >= 2 && seg[0] == "api") {
    version = seg[1];
    i = 2;
  } else if (seg.size() >= 3 && seg[0] == "apis") {
    group = seg[1];
    version = seg[2];
    i = 3;
  } else {
    return not_found;
  }
  Target t;
  if (seg.size() > i && seg[i] == "namespaces") {
    if (seg.size() < i + 3) return not_found;  // namespaces themselves are not served
    t.ns = seg[i + 1];
    i += 2;
  }
  size_t rest = seg.size() - i;
  if (rest < 1 || rest > 3 || (rest == 3 && seg[i + 2] != "status")) return not_found;
  auto it = types_.find(absl::StrCat(group, "/", seg[i]));
  if (it == types_.end() || it->second.version != version) return not_found;
  t.type = it->second;
  if (rest >= 2) t.name = seg[i + 1];
  t.status = rest == 3;
  if (t.status && !t.type.status_subresource) return not_found;
  if (!t.type.namespaced && !t.ns.empty()) return not_found;
  if (t.type.namespaced && t.ns.empty() && !t.name.empty()) return not_found;
  return t;
}

const KubeResourceType* FakeKubeApiServer::Impl::TypeByNameLocked(
    absl::string_view qualified) const {
  for (const auto& [unused, type] : types_) {
    if (type.QualifiedName() == qualified) return &type;
  }
  return nullptr;
}

void FakeKubeApiServer::Impl::Serve(const httplib::Request& req, httplib::Response& res) {
  auto write = [&res](const Reply& r) {
    res.status = r.code;
    if (r.code == 429) res.set_header("Retry-After", "1");
    res.set_content(r.body.dump(), "application/json");
  };
  absl::MutexLock lock(&mu_);
  last_authorization_ = req.get_header_value("Authorization");
  // The review APIs: create-only, nothing stored (FakeKubeAuth).
  const bool token_review = req.path == "/apis/authentication.k8s.io/v1/tokenreviews";
  if (token_review || req.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews") {
    if (req.method != "POST") {
      return write(Fail(405, "the server does not allow this method on the requested resource"));
    }
    ++request_counts_[{"create", token_review ? "tokenreviews.authentication.k8s.io"
                                              : "subjectaccessreviews.authorization.k8s.io"}];
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    FakeKubeAuth::Answer a = token_review ? auth_.ReviewToken(body) : auth_.ReviewAccess(body);
    return write(Reply{a.code, std::move(a.body)});
  }
  absl::StatusOr<Target> t = ResolveLocked(req.path);
  if (!t.ok()) return write(Fail(404, t.status().message()));
  const std::string& m = req.method;
  bool named = !t->name.empty();
  bool all_namespaces = t->type.namespaced && t->ns.empty();
  std::string verb = m == "GET"      ? (named ? "get" : ParamTrue(req, "watch") ? "watch" : "list")
                     : m == "POST"   ? (named || all_namespaces ? "" : "create")
                     : m == "PUT"    ? (named ? "update" : "")
                     : m == "PATCH"  ? (named ? "patch" : "")
                     : m == "DELETE" ? (named ? "delete" : all_namespaces ? "" : "deletecollection")
                                     : "";
  if (t->status && verb != "get" && verb != "update" && verb != "patch") verb.clear();
  if (verb.empty()) {
    return write(Fail(405, "the server does not allow this method on the requested resource"));
  }
  std::string resource = t->type.QualifiedName() + (t->status ? "/status" : "");
  ++request_counts_[{verb, resource}];
  for (FailureRule& rule : failures_) {
    if (rule.remaining > 0 && (rule.verb == "*" || rule.verb == verb) &&
        (rule.resource == "*" || rule.resource == resource)) {
      --rule.remaining;
      return write(Fail(rule.code, absl::StrFormat("injected failure for %s %s", verb, resource)));
    }
  }
  if (verb == "delete") delete_log_[resource].push_back(t->name);
  for (FailureRule& rule : interleaves_) {
    if (rule.remaining > 0 && named && (rule.verb == "*" || rule.verb == verb) &&
        (rule.resource == "*" || rule.resource == resource)) {
      // Another client writes the object first: its resourceVersion moves on.
      auto store = objects_.find(t->type.QualifiedName());
      const std::string key = StoreKey(t->ns, t->name);
      if (store != objects_.end() && store->second.count(key) > 0) {
        --rule.remaining;
        json prev = store->second[key], obj = prev;
        obj["metadata"]["annotations"]["test.peregrine.dev/interleaved"] = absl::StrCat(++interleaved_writes_);
        CommitLocked(t->type, key, "MODIFIED", std::move(obj), std::move(prev));
      }
      break;
    }
  }
  if (verb == "watch") {
    if (std::optional<Reply> error = StartWatchLocked(*t, req, res)) write(*error);
    return;
  }
  Reply reply;
  if (verb == "get") {
    reply = GetLocked(*t, req);
  } else if (verb == "list") {
    reply = ListLocked(*t, req);
  } else if (verb == "patch") {
    reply = PatchLocked(*t, req);
  } else if (verb == "delete") {
    reply = DeleteLocked(*t, req);
  } else if (verb == "deletecollection") {
    reply = DeleteCollectionLocked(*t, req);
  } else {
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      reply = Fail(400, "the request body is not a JSON object");
    } else {
      reply = verb == "create" ? CreateLocked(*t, std::move(body)) : UpdateLocked(*t, body);
    }
  }
  CollectGarbageLocked();
  if (write_hook_ && verb != "get" && verb != "list") {
    write_hook_(verb, resource, t->name, req.get_header_value("User-Agent"));
  }
  if (write_observer_ && verb != "get" && verb != "list") {
    write_observer_(FakeKubeApiServer::WriteRecord{verb, resource, t->name, req.get_header_value("User-Agent"),
                                                   reply.code, &reply.body});
  }
  write(reply);
}

// ---------------------------------------------------------------------------------------
// Reads.

Reply FakeKubeApiServer::Impl::GetLocked(const Target& t, const httplib::Request& req) {
  std::string rv_text = req.get_param_value("resourceVersion");
  int64_t rv = 0;
  if (!rv_text.empty() && !absl::SimpleAtoi(rv_text, &rv)) {
    return Fail(400, absl::StrCat("invalid resource version: ", rv_text));
  }
  if (rv > rv_) return TooLargeVersion(rv, rv_);
  const auto& store = objects_[t.type.QualifiedName()];
  auto it = store.find(StoreKey(t.ns, t.name));
  if (it == store.end()) return NotFound(t.type, t.name);
  return {200, it->second};
}

std::map<std::string, json> FakeKubeApiServer::Impl::SnapshotLocked(const std::string& resource,
                                                                    int64_t rv) const {
  auto live = objects_.find(resource);
  std::map<std::string, json> snap;
  if (live != objects_.end()) snap = live->second;
  for (auto e = history_.rbegin(); e != history_.rend() && e->rv > rv; ++e) {
    if (e->resource != resource) continue;
    if (e->type == "ADDED") {
      snap.erase(e->key);
    } else {
      snap[e->key] = e->prev;
    }
  }
  return snap;
}

Reply FakeKubeApiServer::Impl::ListLocked(const Target& t, const httplib::Request& req) {
  absl::StatusOr<Selector> sel = ParseSelector(req, t.type);
  if (!sel.ok()) return Fail(400, sel.status().message());
  std::string rv_text = req.get_param_value("resourceVersion");
  std::string match = req.get_param_value("resourceVersionMatch");
  std::string cont = req.get_param_value("continue");
  int64_t limit = 0, rv = 0;
  if (req.has_param("limit") && (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) ||
                                 limit < 0)) {
    return Fail(400, "limit must be a non-negative integer");
  }
  if (!rv_text.empty() && !absl::SimpleAtoi(rv_text, &rv)) {
    return Fail(400, absl::StrCat("invalid resource version: ", rv_text));
  }
  int64_t at = rv_;
  std::string start_after;
  if (!cont.empty()) {
    if (!rv_text.empty()) {
      return Fail(400, "specifying resource version is not allowed when using continue");
    }
    std::string decoded;
    json token;
    if (absl::WebSafeBase64Unescape(cont, &decoded)) {
      token = json::parse(decoded, nullptr, /*allow_exceptions=*/false);
    }
    if (!token.is_object() || !token.contains("rv") || !token["rv"].is_number_integer() ||
        !token.contains("start") || !token["start"].is_string()) {
      return Fail(400, "continue key is not valid");
    }
    at = token["rv"].get<int64_t>();
    start_after = token["start"].get<std::string>();
    if (at < compacted_rv_) {
      return Fail(410,
                  "The provided continue parameter is too old to display a consistent list "
                  "result. You can start a new list without the continue parameter.");
    }
  } else if (!match.empty()) {
    if (rv_text.empty()) {
      return Fail(400, "resourceVersionMatch is forbidden unless resourceVersion is provided");
    }
    if (match != "Exact" && match != "NotOlderThan") {
      return Fail(400, absl::StrCat("resourceVersionMatch: Unsupported value: \"", match, "\""));
    }
    if (match == "Exact" && rv == 0) {
      return Fail(400, "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"");
    }
    if (rv > rv_) return TooLargeVersion(rv, rv_);
    if (match == "Exact") {
      if (rv < compacted_rv_) return TooOldVersion(rv, compacted_rv_);
      at = rv;
    }
  } else if (rv != 0) {
    if (rv > rv_) return TooLargeVersion(rv, rv_);
    if (limit > 0) {  // legacy: a paginated list at a version is served exactly
      if (rv < compacted_rv_) return TooOldVersion(rv, compacted_rv_);
      at = rv;
    }
  }
  const std::string resource = t.type.QualifiedName();
  std::map<std::string, json> snapshot;
  const std::map<std::string, json>* store = &objects_[resource];
  if (at != rv_) {
    snapshot = SnapshotLocked(resource, at);
    store = &snapshot;
  }
  json items = json::array();
  std::string next;
  for (auto it = store->upper_bound(start_after); it != store->end(); ++it) {
    if (!InNamespace(it->first, t.ns) || !sel->Matches(it->second)) continue;
    if (limit > 0 && static_cast<int64_t>(items.size()) == limit) {
      next = absl::WebSafeBase64Escape(json{{"rv", at}, {"start", std::prev(it)->first}}.dump());
      break;
    }
    json item = it->second;
    if (!t.type.custom_resource) {
      item.erase("kind");
      item.erase("apiVersion");
    }
    items.push_back(std::move(item));
  }
  json list = {{"kind", t.type.kind + "List"},
               {"apiVersion", ApiVersion(t.type)},
               {"metadata", {{"resourceVersion", std::to_string(at)}}},
               {"items", std::move(items)}};
  if (!next.empty()) list["metadata"]["continue"] = next;
  return {200, list};
}

// ---------------------------------------------------------------------------------------
// Writes.

json FakeKubeApiServer::Impl::CommitLocked(const KubeResourceType& type, const std::string& key,
                                           const char* event, json obj, json prev) {
  ++rv_;
  obj["metadata"]["resourceVersion"] = std::to_string(rv_);
  std::string resource = type.QualifiedName();
  bool deleted = absl::string_view(event) == "DELETED";
  const std::string uid = MetaString(obj, "uid");
  if (deleted) {
    objects_[resource].erase(key);
    uid_index_.erase(uid);
  } else {
    objects_[resource][key] = obj;
    if (!uid.empty()) uid_index_[uid] = {resource, key};
  }
  json refs = OwnerRefs(obj);
  json prev_refs = OwnerRefs(prev);
  // A first set of owner references naming live owners that are not being deleted (a pod
  // its controller creates) gives the collector nothing to do: skip its full scan, which
  // made every such create cost O(objects).
  const bool new_live_owners = prev_refs.empty() && std::all_of(refs.begin(), refs.end(), [this](const json& ref) {
    return LiveOwnerLocked(ref.value("uid", ""));
  });
  if (deleted || Deleting(obj) || (!refs.empty() && refs != prev_refs && !new_live_owners)) gc_pending_ = true;
  history_.push_back({rv_, resource, key, event, obj, std::move(prev)});
  while (history_.size() > options_.history_limit) {
    compacted_rv_ = history_.front().rv;
    history_.pop_front();
  }
  changed_.SignalAll();
  return obj;
}

json FakeKubeApiServer::Impl::WriteLocked(const KubeResourceType& type, const std::string& key,
                                          json obj, json prev) {
  bool finalized = Deleting(obj) && Finalizers(obj).empty();
  return CommitLocked(type, key, finalized ? "DELETED" : "MODIFIED", std::move(obj),
                      std::move(prev));
}

std::string FakeKubeApiServer::Impl::NewUidLocked() {
  uint64_t a = rng_(), b = rng_();
  return absl::StrFormat("%08x-%04x-4%03x-8%03x-%012x", a >> 32, (a >> 16) & 0xffff,
                         a & 0xfff, b >> 52, b & 0xffffffffffffULL);
}

std::string FakeKubeApiServer::Impl::NameSuffixLocked() {
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";  // as the real server
  std::string s;
  for (int i = 0; i < 5; ++i) s += kAlphabet[rng_() % (sizeof(kAlphabet) - 1)];
  return s;
}

namespace {

// Checks kind/apiVersion against the URL (filling them in when absent) and the
// namespace against the path; nullopt when the object fits.
std::optional<Reply> CheckIdentity(const Target& t, json& obj) {
  std::string api_version = ApiVersion(t.type);
  if (obj.contains("apiVersion") && obj["apiVersion"] != api_version) {
    return Fail(400, absl::StrFormat(
                         "the API version in the data (%s) does not match the expected API "
                         "version (%s)",
                         obj["apiVersion"].dump(), api_version));
  }
  if (obj.contains("kind") && obj["kind"] != t.type.kind) {
    return Fail(400, absl::StrFormat("the kind in the data (%s) does not match the expected kind "
                                     "(%s)",
                                     obj["kind"].dump(), t.type.kind));
  }
  obj["apiVersion"] = api_version;
  obj["kind"] = t.type.kind;
  json& meta = obj["metadata"];
  if (meta.is_null()) meta = json::object();
  if (!meta.is_object()) return Fail(400, "metadata must be an object");
  std::string ns = MetaString(obj, "namespace");
  if (t.type.namespaced) {
    if (!ns.empty() && ns != t.ns) {
      return Fail(400,
                  "the namespace of the provided object does not match the namespace sent on "
                  "the request");
    }
    meta["namespace"] = t.ns;
  } else {
    meta.erase("namespace");
  }
  return std::nullopt;
}

}  // namespace

Reply FakeKubeApiServer::Impl::CreateLocked(const Target& t, json obj) {
  if (auto error = CheckIdentity(t, obj)) return *error;
  json& meta = obj["metadata"];
  if (!MetaString(obj, "resourceVersion").empty()) {
    return Fail(500, "resourceVersion should not be set on objects to be created");
  }
  std::string name = MetaString(obj, "name");
  std::string generate = MetaString(obj, "generateName");
  if (name.empty() && !generate.empty()) name = generate + NameSuffixLocked();
  if (name.empty()) {
    return Invalid(t.type, "", "metadata.name: Required value: name or generateName is required");
  }
  if (!ValidName(name)) {
    return Invalid(t.type, name,
                   absl::StrFormat("metadata.name: Invalid value: \"%s\": a lowercase RFC 1123 "
                                   "subdomain must consist of lower case alphanumeric "
                                   "characters, '-' or '.'",
                                   name));
  }
  std::string key = StoreKey(t.ns, name);
  if (objects_[t.type.QualifiedName()].count(key) > 0) {
    return Fail(409, absl::StrFormat("%s \"%s\" already exists", t.type.QualifiedName(), name),
                Details(t.type, name), "AlreadyExists");
  }
  meta["name"] = name;
  meta["uid"] = NewUidLocked();
  meta["creationTimestamp"] = Timestamp();
  meta["generation"] = 1;
  meta.erase("deletionTimestamp");
  meta.erase("deletionGracePeriodSeconds");
  if (t.type.status_subresource && !t.type.keep_status_on_create) {
    obj.erase("status");
    if (!t.type.status_on_create.is_null()) obj["status"] = t.type.status_on_create;
  }
  return {201, CommitLocked(t.type, key, "ADDED", std::move(obj), nullptr)};
}

Reply FakeKubeApiServer::Impl::UpdateLocked(const Target& t, json obj) {
  if (auto error = CheckIdentity(t, obj)) return *error;
  std::string body_name = MetaString(obj, "name");
  if (!body_name.empty() && body_name != t.name) {
    return Fail(400, absl::StrFormat("the name of the object (%s) does not match the name on "
                                     "the URL (%s)",
                                     body_name, t.name));
  }
  obj["metadata"]["name"] = t.name;
  std::string key = StoreKey(t.ns, t.name);
  auto& store = objects_[t.type.QualifiedName()];
  auto it = store.find(key);
  if (it == store.end()) return NotFound(t.type, t.name);
  const json existing = it->second;
  std::string rv = MetaString(obj, "resourceVersion");
  if (rv.empty() && t.type.custom_resource) {
    return Invalid(t.type, t.name,
                   "metadata.resourceVersion: Invalid value: 0x0: must be specified for an "
                   "update");
  }
  if (!rv.empty() && rv != MetaString(existing, "resourceVersion")) {
    return Conflict(t.type, t.name, kModified);
  }
  std::string uid = MetaString(obj, "uid");
  if (!uid.empty() && uid != MetaString(existing, "uid")) {
    return Conflict(t.type, t.name,
                    absl::StrFormat("Precondition failed: UID in precondition: %s, UID in "
                                    "object meta: %s",
                                    uid, MetaString(existing, "uid")));
  }
  json updated;
  if (t.status) {  // only .status changes through the status subresource
    updated = existing;
    if (obj.contains("status")) {
      updated["status"] = obj["status"];
    } else {
      updated.erase("status");
    }
  } else {
    updated = std::move(obj);
    json& meta = updated["metadata"];
    for (const char* field : {"uid", "creationTimestamp", "generation", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "resourceVersion"}) {
      if (const json* v = MetaField(existing, field)) {
        meta[field] = *v;
      } else {
        meta.erase(field);
      }
    }
    if (t.type.status_subresource) {
      if (existing.contains("status")) {
        updated["status"] = existing["status"];
      } else {
        updated.erase("status");
      }
    }
    if (Deleting(existing)) {
      for (const std::string& f : Finalizers(updated)) {
        if (!HasFinalizer(existing, f)) {
          return Invalid(t.type, t.name,
                         "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                         "object is being deleted");
        }
      }
    }
    if (SpecChanged(existing, updated, t.type.status_subresource)) {
      meta["generation"] = existing["metadata"].value("generation", int64_t{0}) + 1;
    }
  }
  if (updated == existing) return {200, existing};  // a no-op write stores nothing
  return {200, WriteLocked(t.type, key, std::move(updated), existing)};
}

Reply FakeKubeApiServer::Impl::PatchLocked(const Target& t, const httplib::Request& req) {
  std::string content_type(absl::StripAsciiWhitespace(
      absl::string_view(req.get_header_value("Content-Type")).substr(
          0, req.get_header_value("Content-Type").find(';'))));
  bool merge = content_type == "application/merge-patch+json";
  if (!merge && content_type != "application/json-patch+json") {
    return Fail(415,
                absl::StrCat("the body of the request was in an unknown format - accepted media "
                             "types include: application/json-patch+json, "
                             "application/merge-patch+json (got \"",
                             content_type, "\")"));
  }
  const auto& store = objects_[t.type.QualifiedName()];
  auto it = store.find(StoreKey(t.ns, t.name));
  if (it == store.end()) return NotFound(t.type, t.name);
  json patch = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded() || (merge ? !patch.is_object() : !patch.is_array())) {
    return Fail(400, "the patch is not valid JSON of the declared patch type");
  }
  json patched = it->second;
  if (merge) {
    patched.merge_patch(patch);  // RFC 7386: null deletes a key, objects merge, rest replaces
  } else {
    try {
      patched = patched.patch(patch);  // RFC 6902
    } catch (const json::exception& e) {
      return Invalid(t.type, t.name, absl::StrCat("the JSON patch cannot be applied: ", e.what()));
    }
  }
  if (!patched.is_object()) return Invalid(t.type, t.name, "the patched object is not an object");
  // A patch is conditional only when it names a resourceVersion itself.
  if (MetaString(patched, "resourceVersion").empty()) {
    patched["metadata"]["resourceVersion"] = MetaString(it->second, "resourceVersion");
  }
  return UpdateLocked(t, std::move(patched));
}

json FakeKubeApiServer::Impl::DeleteObjectLocked(const KubeResourceType& type,
                                                 const std::string& key,
                                                 absl::string_view policy) {
  const json prev = objects_[type.QualifiedName()][key];
  json obj = prev;
  std::vector<std::string> finalizers = Finalizers(obj);
  const char* extra = policy == "Foreground" ? "foregroundDeletion"
                      : policy == "Orphan"   ? "orphan"
                                             : nullptr;
  if (extra != nullptr && !HasFinalizer(obj, extra)) finalizers.push_back(extra);
  SetFinalizers(obj, finalizers);
  if (finalizers.empty()) return CommitLocked(type, key, "DELETED", std::move(obj), prev);
  if (!Deleting(obj)) {
    json& meta = obj["metadata"];
    meta["deletionTimestamp"] = Timestamp();
    meta["deletionGracePeriodSeconds"] = 0;
    meta["generation"] = meta.value("generation", int64_t{0}) + 1;
  }
  if (obj == prev) return prev;
  return CommitLocked(type, key, "MODIFIED", std::move(obj), prev);
}

namespace {

// Reads DeleteOptions from the body (or the query) into a propagation policy.
absl::StatusOr<std::string> PropagationPolicy(const httplib::Request& req, const json& options) {
  std::string policy = req.get_param_value("propagationPolicy");
  if (options.contains("propagationPolicy") && options["propagationPolicy"].is_string()) {
    policy = options["propagationPolicy"].get<std::string>();
  }
  if (policy.empty() && options.value("orphanDependents", false)) policy = "Orphan";
  if (policy.empty()) policy = "Background";
  if (policy != "Background" && policy != "Foreground" && policy != "Orphan") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "propagationPolicy: Unsupported value: \"%s\": supported values: \"Foreground\", "
        "\"Background\", \"Orphan\"",
        policy));
  }
  return policy;
}

}  // namespace

Reply FakeKubeApiServer::Impl::DeleteLocked(const Target& t, const httplib::Request& req) {
  std::string key = StoreKey(t.ns, t.name);
  const auto& store = objects_[t.type.QualifiedName()];
  auto it = store.find(key);
  if (it == store.end()) return NotFound(t.type, t.name);
  json options = json::object();
  if (!absl::StripAsciiWhitespace(req.body).empty()) {
    options = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!options.is_object()) return Fail(400, "the DeleteOptions body is not a JSON object");
  }
  if (options.contains("preconditions") && options["preconditions"].is_object()) {
    const json& pre = options["preconditions"];
    for (const char* field : {"uid", "resourceVersion"}) {
      if (!pre.contains(field) || !pre[field].is_string()) continue;
      std::string want = pre[field].get<std::string>(), have = MetaString(it->second, field);
      if (want != have) {
        return Conflict(t.type, t.name,
                        absl::StrFormat("Precondition failed: %s in precondition: %s, %s in "
                                        "object meta: %s",
                                        field == absl::string_view("uid") ? "UID" : "ResourceVersion",
                                        want,
                                        field == absl::string_view("uid") ? "UID" : "ResourceVersion",
                                        have));
      }
    }
  }
  absl::StatusOr<std::string> policy = PropagationPolicy(req, options);
  if (!policy.ok()) return Invalid(t.type, t.name, policy.status().message());
  return {200, DeleteObjectLocked(t.type, key, *policy)};
}

Reply FakeKubeApiServer::Impl::DeleteCollectionLocked(const Target& t,
                                                      const httplib::Request& req) {
  absl::StatusOr<Selector> sel = ParseSelector(req, t.type);
  if (!sel.ok()) return Fail(400, sel.status().message());
  json options = json::parse(req.body.empty() ? "{}" : req.body, nullptr, false);
  if (!options.is_object()) return Fail(400, "the DeleteOptions body is not a JSON object");
  absl::StatusOr<std::string> policy = PropagationPolicy(req, options);
  if (!policy.ok()) return Fail(400, policy.status().message());
  std::vector<std::string> keys;
  for (const auto& [key, obj] : objects_[t.type.QualifiedName()]) {
    if (InNamespace(key, t.ns) && sel->Matches(obj)) keys.push_back(key);
  }
  json items = json::array();
  for (const std::string& key : keys) items.push_back(DeleteObjectLocked(t.type, key, *policy));
  return {200, json{{"kind", t.type.kind + "List"},
                    {"apiVersion", ApiVersion(t.type)},
                    {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                    {"items", std::move(items)}}};
}

// The garbage collector, run to a fixed point after every write that may concern it:
//  - a dependent none of whose owners exist (by uid) is deleted (background);
//  - a dependent whose owners are gone or deleting in the foreground is deleted in the
//    foreground; references to absent owners are dropped while a live owner remains;
//  - an owner deleting in the foreground loses its foregroundDeletion finalizer once
//    no dependent with blockOwnerDeletion=true remains;
//  - an owner deleting with the orphan finalizer has its dependents' references to it
//    removed, then loses the finalizer.
void FakeKubeApiServer::Impl::CollectGarbageLocked() {
  while (gc_pending_) {
    gc_pending_ = false;
    struct Action {
      std::string resource, key, rv;
      std::function<void(const KubeResourceType&, const std::string&, json)> apply;
    };
    absl::flat_hash_map<std::string, const json*> by_uid;
    absl::flat_hash_map<std::string, bool> blocked;  // owner uid -> has a blocking dependent
    for (const auto& [resource, store] : objects_) {
      for (const auto& [key, obj] : store) {
        by_uid[MetaString(obj, "uid")] = &obj;
        for (const json& ref : OwnerRefs(obj)) {
          if (ref.value("blockOwnerDeletion", false)) blocked[ref.value("uid", "")] = true;
        }
      }
    }
    std::vector<Action> actions;
    for (const auto& [resource, store] : objects_) {
      for (const auto& [key, obj] : store) {
        std::string uid = MetaString(obj, "uid");
        auto add = [&](auto fn) {
          actions.push_back({resource, key, MetaString(obj, "resourceVersion"), fn});
        };
        if (Deleting(obj) && HasFinalizer(obj, "orphan")) {
          add([this, uid](const KubeResourceType& type, const std::string& key, json owner) {
            for (auto& [resource, store] : objects_) {
              const KubeResourceType* dep_type = TypeByNameLocked(resource);
              std::vector<std::string> dependents;
              for (const auto& [k, o] : store) {
                for (const json& ref : OwnerRefs(o)) {
                  if (ref.value("uid", "") == uid) dependents.push_back(k);
                }
              }
              for (const std::string& k : dependents) {
                json prev = store[k], o = prev, kept = json::array();
                for (const json& ref : OwnerRefs(o)) {
                  if (ref.value("uid", "") != uid) kept.push_back(ref);
                }
                o["metadata"]["ownerReferences"] = kept;
                if (kept.empty()) o["metadata"].erase("ownerReferences");
                WriteLocked(*dep_type, k, std::move(o), std::move(prev));
              }
            }
            json prev = owner;
            std::vector<std::string> f = Finalizers(owner);
            f.erase(std::find(f.begin(), f.end(), "orphan"));
            SetFinalizers(owner, f);
            WriteLocked(type, key, std::move(owner), std::move(prev));
          });
          continue;
        }
        if (Deleting(obj) && HasFinalizer(obj, "foregroundDeletion") && !blocked[uid]) {
          add([this](const KubeResourceType& type, const std::string& key, json owner) {
            json prev = owner;
            std::vector<std::string> f = Finalizers(owner);
            f.erase(std::find(f.begin(), f.end(), "foregroundDeletion"));
            SetFinalizers(owner, f);
            WriteLocked(type, key, std::move(owner), std::move(prev));
          });
          continue;
        }
        json refs = OwnerRefs(obj);
        if (refs.empty() || Deleting(obj)) continue;
        json solid = json::array();
        bool waiting = false;
        for (const json& ref : refs) {
          auto owner = by_uid.find(ref.value("uid", ""));
          if (owner == by_uid.end()) continue;  // dangling
          if (Deleting(*owner->second) && HasFinalizer(*owner->second, "foregroundDeletion")) {
            waiting = true;
          } else {
            solid.push_back(ref);
          }
        }
        if (solid.empty()) {
          std::string policy = waiting ? "Foreground" : "Background";
          add([this, policy](const KubeResourceType& type, const std::string& key, json) {
            DeleteObjectLocked(type, key, policy);
          });
        } else if (solid.size() != refs.size()) {
          add([this, solid](const KubeResourceType& type, const std::string& key,
                            json dependent) {
            json prev = dependent;
            dependent["metadata"]["ownerReferences"] = solid;
            WriteLocked(type, key, std::move(dependent), std::move(prev));
          });
        }
      }
    }
    for (Action& a : actions) {
      auto store = objects_.find(a.resource);
      if (store == objects_.end()) continue;
      auto it = store->second.find(a.key);
      // Skip an object another action changed meanwhile: that write re-runs the loop.
      if (it == store->second.end() || MetaString(it->second, "resourceVersion") != a.rv) continue;
      const KubeResourceType* type = TypeByNameLocked(a.resource);
      if (type != nullptr) a.apply(*type, a.key, it->second);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Watch.

namespace {

std::string EventLine(absl::string_view type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump() + "\n";
}

}  // namespace

std::optional<Reply> FakeKubeApiServer::Impl::StartWatchLocked(const Target& t,
                                                               const httplib::Request& req,
                                                               httplib::Response& res) {
  absl::StatusOr<Selector> sel = ParseSelector(req, t.type);
  if (!sel.ok()) return Fail(400, sel.status().message());
  auto st = std::make_shared<WatchState>();  // shared with httplib's copies of the provider
  st->type = t.type;
  st->ns = t.ns;
  st->selector = *std::move(sel);
  st->bookmarks = ParamTrue(req, "allowWatchBookmarks");
  std::string rv_text = req.get_param_value("resourceVersion");
  int64_t rv = 0;
  if (!rv_text.empty() && !absl::SimpleAtoi(rv_text, &rv)) {
    return Fail(400, absl::StrCat("invalid resource version: ", rv_text));
  }
  if (rv > rv_) return TooLargeVersion(rv, rv_);
  if (ParamTrue(req, "sendInitialEvents")) {
    if (!st->bookmarks || req.get_param_value("resourceVersionMatch") != "NotOlderThan") {
      return Invalid(t.type, "",
                     "sendInitialEvents: Forbidden: sendInitialEvents requires "
                     "allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan");
    }
    st->initial_events = st->initial_end_mark = true;
  } else {
    st->initial_events = rv == 0;  // unset or "0": start from the current state
    st->next_rv = rv;
  }
  int64_t timeout_s = 0;
  if (req.has_param("timeoutSeconds") &&
      (!absl::SimpleAtoi(req.get_param_value("timeoutSeconds"), &timeout_s) || timeout_s < 0)) {
    return Fail(400, "timeoutSeconds must be a non-negative integer");
  }
  absl::Time now = absl::Now();
  st->deadline = now + (timeout_s > 0 ? absl::Seconds(timeout_s) : options_.default_watch_timeout);
  st->next_bookmark = now + options_.bookmark_interval;
  st->bookmark_epoch = bookmark_epoch_;
  st->drop_epoch = drop_epoch_;
  ++open_watches_;
  res.status = 200;
  // "application/json;stream=watch" rather than bare "application/json": httplib would
  // otherwise compress the stream for clients that accept gzip and hold events back.
  res.set_chunked_content_provider(
      "application/json;stream=watch",
      [this, st](size_t, httplib::DataSink& sink) { return WatchStep(*st, sink); },
      [this](bool) {
        absl::MutexLock lock(&mu_);
        --open_watches_;
      });
  return std::nullopt;
}

void FakeKubeApiServer::Impl::CollectEventsLocked(WatchState& st, std::string& out) {
  const std::string resource = st.type.QualifiedName();
  auto it = std::upper_bound(history_.begin(), history_.end(), st.next_rv,
                             [](int64_t rv, const HistoryEntry& e) { return rv < e.rv; });
  for (; it != history_.end(); ++it) {
    const HistoryEntry& e = *it;
    if (e.resource != resource || !InNamespace(e.key, st.ns)) continue;
    bool now = st.selector.Matches(e.object);
    if (e.type == "DELETED") {
      if (now) out += EventLine("DELETED", e.object);
      continue;
    }
    bool before = !e.prev.is_null() && st.selector.Matches(e.prev);
    if (now) {
      out += EventLine(before ? "MODIFIED" : "ADDED", e.object);
    } else if (before) {  // left the selector: the watcher sees it go away
      json gone = e.prev;
      gone["metadata"]["resourceVersion"] = std::to_string(e.rv);
      out += EventLine("DELETED", gone);
    }
  }
  st.next_rv = rv_;
}

bool FakeKubeApiServer::Impl::WatchStep(WatchState& st, httplib::DataSink& sink) {
  std::string out;
  bool end = false;
  {
    absl::MutexLock lock(&mu_);
    auto bookmark = [&](int64_t rv, bool initial_end) {
      json meta = {{"resourceVersion", std::to_string(rv)}};
      if (initial_end) meta["annotations"] = {{"k8s.io/initial-events-end", "true"}};
      out += EventLine("BOOKMARK", {{"kind", st.type.kind},
                                    {"apiVersion", ApiVersion(st.type)},
                                    {"metadata", meta}});
    };
    if (!st.started) {
      st.started = true;
      if (st.initial_events) {
        for (const auto& [key, obj] : objects_[st.type.QualifiedName()]) {
          if (InNamespace(key, st.ns) && st.selector.Matches(obj)) out += EventLine("ADDED", obj);
        }
        st.next_rv = rv_;
        if (st.initial_end_mark) bookmark(rv_, true);
      }
    }
    while (out.empty() && !end) {
      if (stopping_ || st.drop_epoch != drop_epoch_) return false;  // break the connection
      absl::Time now = absl::Now();
      if (st.next_rv < compacted_rv_) {
        out = EventLine("ERROR", TooOldVersion(st.next_rv, compacted_rv_).body);
        end = true;
        break;
      }
      CollectEventsLocked(st, out);
      if (!out.empty()) break;
      if (now >= st.deadline) {
        end = true;
        break;
      }
      if (st.bookmarks && (now >= st.next_bookmark || st.bookmark_epoch != bookmark_epoch_)) {
        bookmark(st.next_rv, false);
        st.next_bookmark = now + options_.bookmark_interval;
        st.bookmark_epoch = bookmark_epoch_;
        break;
      }
      changed_.WaitWithDeadline(&mu_, st.bookmarks ? std::min(st.deadline, st.next_bookmark)
                                                   : st.deadline);
    }
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (end) sink.done();
  return true;
}

// ---------------------------------------------------------------------------------------
// Test hooks.

absl::StatusOr<json> FakeKubeApiServer::Impl::Get(absl::string_view resource, absl::string_view ns,
                                                  absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto store = objects_.find(std::string(resource));
  if (store != objects_.end()) {
    auto it = store->second.find(StoreKey(ns, name));
    if (it != store->second.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrFormat("%s \"%s/%s\" not found", resource, ns, name));
}

absl::StatusOr<json> FakeKubeApiServer::Impl::Create(absl::string_view resource,
                                                     absl::string_view ns, json object) {
  absl::MutexLock lock(&mu_);
  const KubeResourceType* type = TypeByNameLocked(resource);
  if (type == nullptr) return absl::NotFoundError(absl::StrCat("no resource ", resource));
  if (!object.is_object()) return absl::InvalidArgumentError("object must be a JSON object");
  Reply reply = CreateLocked(Target{*type, std::string(ns), "", false}, std::move(object));
  CollectGarbageLocked();
  if (reply.code >= 400) {
    return absl::Status(reply.code == 409 ? absl::StatusCode::kAlreadyExists
                                          : absl::StatusCode::kInvalidArgument,
                        reply.body.value("message", ""));
  }
  return reply.body;
}

absl::Status FakeKubeApiServer::Impl::MutateStatus(absl::string_view resource,
                                                   absl::string_view ns, absl::string_view name,
                                                   const std::function<void(json&)>& mutate, bool whole) {
  absl::MutexLock lock(&mu_);
  const KubeResourceType* type = TypeByNameLocked(resource);
  auto store = objects_.find(std::string(resource));
  std::string key = StoreKey(ns, name);
  if (type == nullptr || store == objects_.end() || store->second.count(key) == 0) {
    return absl::NotFoundError(absl::StrFormat("%s \"%s/%s\" not found", resource, ns, name));
  }
  json prev = store->second[key], obj = prev;
  if (whole) {
    mutate(obj);
    obj["metadata"] = prev["metadata"];  // the server's fields are the server's
  } else {
    if (!obj["status"].is_object()) obj["status"] = json::object();
    mutate(obj["status"]);
  }
  if (obj != prev) CommitLocked(*type, key, "MODIFIED", std::move(obj), std::move(prev));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------

FakeKubeApiServer::FakeKubeApiServer(FakeKubeApiServerOptions options)
    : impl_(std::make_unique<Impl>(options)) {
  RegisterResource({"", "v1", "pods", "Pod", true, true, false, false, {{"phase", "Pending"}},
                    {"spec.nodeName", "status.phase"}});
  RegisterResource({"", "v1", "services", "Service", true, true, false, false,
                    {{"loadBalancer", json::object()}}, {}});
  RegisterResource({"", "v1", "events", "Event", true, false, false, false, nullptr,
                    {"involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
                     "involvedObject.uid", "reason", "type"}});
  RegisterResource({"", "v1", "nodes", "Node", false, true, false, true, nullptr,
                    {"spec.unschedulable"}});
  RegisterResource({"coordination.k8s.io", "v1", "leases", "Lease", true, false, false, false,
                    nullptr, {}});
  RegisterResource({"events.k8s.io", "v1", "events", "Event", true, false, false, false, nullptr,
                    {"regarding.kind", "regarding.name", "regarding.namespace", "regarding.uid",
                     "reason", "type"}});
  RegisterResource({"peregrine.dev", "v1alpha1", "trainingjobs", "TrainingJob", true, true, true,
                    false, nullptr, {}});
}

FakeKubeApiServer::~FakeKubeApiServer() { Stop(); }
absl::Status FakeKubeApiServer::Start() { return impl_->Start(); }
void FakeKubeApiServer::Stop() { impl_->Stop(); }
int FakeKubeApiServer::port() const { return impl_->port(); }
std::string FakeKubeApiServer::base_url() const {
  return absl::StrCat("http://127.0.0.1:", impl_->port());
}
void FakeKubeApiServer::RegisterResource(KubeResourceType type) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->types_[absl::StrCat(type.group, "/", type.plural)] = std::move(type);
}
int64_t FakeKubeApiServer::ResourceVersionForTest() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->rv_;
}
void FakeKubeApiServer::CompactForTest() {
  absl::MutexLock lock(&impl_->mu_);
  impl_->compacted_rv_ = impl_->rv_;
  impl_->history_.clear();
  impl_->changed_.SignalAll();
}
void FakeKubeApiServer::DropWatchesForTest() {
  absl::MutexLock lock(&impl_->mu_);
  ++impl_->drop_epoch_;
  impl_->changed_.SignalAll();
}
void FakeKubeApiServer::EmitBookmarksForTest() {
  absl::MutexLock lock(&impl_->mu_);
  ++impl_->bookmark_epoch_;
  impl_->changed_.SignalAll();
}
int FakeKubeApiServer::OpenWatchCountForTest() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->open_watches_;
}
void FakeKubeApiServer::FailNextRequestsForTest(std::string verb, std::string resource, int count,
                                                int http_code) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->failures_.push_back({std::move(verb), std::move(resource), count, http_code});
}
void FakeKubeApiServer::InterleaveWriteForTest(std::string verb, std::string resource, int count) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->interleaves_.push_back({std::move(verb), std::move(resource), count, 0});
}
std::vector<std::string> FakeKubeApiServer::DeleteRequestsForTest(absl::string_view resource) const {
  absl::MutexLock lock(&impl_->mu_);
  auto it = impl_->delete_log_.find(std::string(resource));
  return it == impl_->delete_log_.end() ? std::vector<std::string>{} : it->second;
}
void FakeKubeApiServer::SetWriteHookForTest(WriteHook hook) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->write_hook_ = std::move(hook);
}

void FakeKubeApiServer::SetWriteObserverForTest(WriteObserver observer) {
  absl::MutexLock lock(&impl_->mu_);
  impl_->write_observer_ = std::move(observer);
}

std::map<std::pair<std::string, std::string>, int> FakeKubeApiServer::RequestCountsForTest() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->request_counts_;
}

int FakeKubeApiServer::RequestCountForTest(absl::string_view verb,
                                           absl::string_view resource) const {
  absl::MutexLock lock(&impl_->mu_);
  int n = 0;
  for (const auto& [key, count] : impl_->request_counts_) {
    if ((verb == "*" || key.first == verb) && (resource == "*" || key.second == resource)) {
      n += count;
    }
  }
  return n;
}
FakeKubeAuth& FakeKubeApiServer::auth() { return impl_->auth_; }

std::string FakeKubeApiServer::LastAuthorizationForTest() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->last_authorization_;
}
absl::StatusOr<json> FakeKubeApiServer::GetForTest(absl::string_view resource, absl::string_view ns,
                                                   absl::string_view name) const {
  return impl_->Get(resource, ns, name);
}
absl::StatusOr<json> FakeKubeApiServer::CreateForTest(absl::string_view resource,
                                                      absl::string_view ns, json object) {
  return impl_->Create(resource, ns, std::move(object));
}
absl::Status FakeKubeApiServer::MutateStatusForTest(absl::string_view resource,
                                                    absl::string_view ns, absl::string_view name,
                                                    const std::function<void(json&)>& mutate) {
  return impl_->MutateStatus(resource, ns, name, mutate);
}
absl::Status FakeKubeApiServer::MutateObjectForTest(absl::string_view resource,
                                                    absl::string_view ns, absl::string_view name,
                                                    const std::function<void(json&)>& mutate) {
  return impl_->MutateStatus(resource, ns, name, mutate, /*whole=*/true);
}
absl::Status FakeKubeApiServer::SetPodPhaseForTest(absl::string_view ns, absl::string_view name,
                                                   absl::string_view phase) {
  return MutateStatusForTest("pods", ns, name, [&](json& s) { s["phase"] = phase; });
}
absl::Status FakeKubeApiServer::SetNodeReadyForTest(absl::string_view name, bool ready) {
  return MutateStatusForTest("nodes", "", name, [&](json& s) {
    json condition = {{"type", "Ready"},
                      {"status", ready ? "True" : "False"},
                      {"reason", ready ? "KubeletReady" : "KubeletNotReady"},
                      {"lastHeartbeatTime", Timestamp()},
                      {"lastTransitionTime", Timestamp()}};
    json& conditions = s["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    for (json& c : conditions) {
      if (c.value("type", "") == "Ready") {
        if (c.value("status", "") == condition["status"]) return;  // no transition
        c = condition;
        return;
      }
    }
    conditions.push_back(condition);
  });
}

}  // namespace peregrine::testing
