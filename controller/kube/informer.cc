#include "controller/kube/informer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace peregrine::kube {

using nlohmann::json;

namespace {

std::string ResourceVersionOf(const json& object) {
  if (!object.is_object()) return "";
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto rv = meta->find("resourceVersion");
  return rv != meta->end() && rv->is_string() ? rv->get<std::string>() : "";
}

}  // namespace

absl::Duration JitteredBackoff::Next(absl::Time now, Random& random) {
  if (last_start_ == absl::InfinitePast() || now - last_start_ > policy_.reset_after) {
    current_ = policy_.initial;
    last_start_ = now;
  } else if (current_ < policy_.max) {
    current_ = std::min(policy_.max, current_ * policy_.factor);
  }
  return current_ + current_ * (policy_.jitter * random.Uniform01());
}

IndexFunc IndexByLabel(std::string label_key) {
  return [label_key = std::move(label_key)](const json& object) -> std::vector<std::string> {
    if (!object.is_object()) return {};
    auto meta = object.find("metadata");
    if (meta == object.end() || !meta->is_object()) return {};
    auto labels = meta->find("labels");
    if (labels == meta->end() || !labels->is_object()) return {};
    auto value = labels->find(label_key);
    if (value == labels->end() || !value->is_string() || value->get_ref<const std::string&>().empty()) {
      return {};
    }
    return {value->get<std::string>()};
  };
}

Informer::Informer(RestClient* client, InformerOptions options, Clock* clock, Random* random)
    : client_(client), options_(std::move(options)), clock_(clock), random_(random) {
  std::vector<std::string> namespaces = options_.namespaces;
  std::sort(namespaces.begin(), namespaces.end());
  namespaces.erase(std::unique(namespaces.begin(), namespaces.end()), namespaces.end());
  if (namespaces.empty()) {
    streams_.push_back(std::make_unique<Stream>());
    streams_.back()->resource = options_.resource;
  }
  for (const std::string& ns : namespaces) {
    streams_.push_back(std::make_unique<Stream>());
    streams_.back()->resource = options_.resource;
    streams_.back()->resource.namespace_name = ns;
  }
}

Informer::~Informer() { Stop(); }

void Informer::AddIndex(const std::string& name, IndexFunc index) {
  absl::MutexLock lock(&mu_);
  indexes_[name].func = std::move(index);
}

void Informer::AddHandler(KeyHandler handler) { handlers_.push_back(std::move(handler)); }

void Informer::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || stopping_) return;
  started_ = true;
  for (const std::unique_ptr<Stream>& stream : streams_) {
    Stream* st = stream.get();
    st->thread = std::thread([this, st] {
      Run(*st);
      st->loop_done.Notify();
    });
  }
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
    if (!started_) return;
  }
  // A cancel that lands before the watch connection exists cannot abort it, so it is
  // re-issued until the loop has returned.
  for (const std::unique_ptr<Stream>& stream : streams_) {
    stream->cancel.Cancel();
    while (!stream->loop_done.WaitForNotificationWithTimeout(absl::Milliseconds(50))) stream->cancel.Cancel();
    if (stream->thread.joinable()) stream->thread.join();
  }
}

bool Informer::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool Informer::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = clock_->Now() + d;
  while (!stopping_) {
    if (clock_->WaitWithDeadline(cv_, mu_, deadline)) break;
  }
  return !stopping_;
}

void Informer::SetError(Stream& stream, absl::Status status) {
  absl::MutexLock lock(&mu_);
  stream.last_error = std::move(status);
}

bool Informer::HasSynced() {
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<Stream>& stream : streams_) {
    if (!stream->synced) return false;
  }
  return true;
}

ObjectPtr Informer::Get(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = items_.find(key);
  return it == items_.end() ? nullptr : it->second;
}

std::vector<ObjectPtr> Informer::List() {
  absl::MutexLock lock(&mu_);
  std::vector<ObjectPtr> out;
  out.reserve(items_.size());
  for (const auto& [key, object] : items_) out.push_back(object);
  return out;
}

std::vector<std::string> Informer::Keys() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [key, object] : items_) out.push_back(key);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ObjectPtr> Informer::ByIndex(const std::string& index, const std::string& value) {
  absl::MutexLock lock(&mu_);
  std::vector<ObjectPtr> out;
  auto idx = indexes_.find(index);
  if (idx == indexes_.end()) return out;
  auto keys = idx->second.keys_by_value.find(value);
  if (keys == idx->second.keys_by_value.end()) return out;
  for (const std::string& key : keys->second) {
    auto it = items_.find(key);
    if (it != items_.end()) out.push_back(it->second);
  }
  return out;
}

std::string Informer::LastSyncResourceVersion() {
  absl::MutexLock lock(&mu_);
  return streams_.front()->resource_version;
}

int Informer::ListCount() {
  absl::MutexLock lock(&mu_);
  int count = 0;
  for (const std::unique_ptr<Stream>& stream : streams_) count += stream->list_count;
  return count;
}

absl::Status Informer::LastError() {
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<Stream>& stream : streams_) {
    if (!stream->last_error.ok()) return stream->last_error;
  }
  return absl::OkStatus();
}

void Informer::RemoveLocked(const std::string& key) {
  auto it = items_.find(key);
  if (it == items_.end()) return;
  for (auto& [name, index] : indexes_) {
    for (const std::string& value : index.func(*it->second)) {
      auto keys = index.keys_by_value.find(value);
      if (keys == index.keys_by_value.end()) continue;
      keys->second.erase(key);
      if (keys->second.empty()) index.keys_by_value.erase(keys);
    }
  }
  items_.erase(it);
}

void Informer::UpsertLocked(const std::string& key, ObjectPtr object) {
  RemoveLocked(key);
  for (auto& [name, index] : indexes_) {
    for (const std::string& value : index.func(*object)) index.keys_by_value[value].insert(key);
  }
  items_[key] = std::move(object);
}

void Informer::Notify(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    for (const KeyHandler& handler : handlers_) handler(key);
  }
}

absl::Status Informer::ListAndReplace(Stream& stream) {
  ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  absl::StatusOr<json> list = client_->List(stream.resource, list_options);
  if (!list.ok()) return list.status();
  absl::flat_hash_map<std::string, ObjectPtr> fresh;
  for (json& item : (*list)["items"]) {
    std::string key = ObjectKey(item);
    if (key.empty()) {
      return absl::DataLossError(absl::StrCat("LIST ", stream.resource.CollectionPath(),
                                              ": an item has no metadata.name"));
    }
    fresh[key] = std::make_shared<const json>(std::move(item));
  }
  std::vector<std::string> changed;
  {
    absl::MutexLock lock(&mu_);
    // This stream's objects are those of its namespace (keys "namespace/name"); the
    // other namespaces' streams keep theirs.
    const std::string prefix =
        stream.resource.namespace_name.empty() ? "" : absl::StrCat(stream.resource.namespace_name, "/");
    std::vector<std::string> gone;
    for (const auto& [key, object] : items_) {
      if (absl::StartsWith(key, prefix) && !fresh.contains(key)) gone.push_back(key);
    }
    for (const std::string& key : gone) {
      RemoveLocked(key);
      changed.push_back(key);
    }
    for (auto& [key, object] : fresh) {
      auto old = items_.find(key);
      if (old != items_.end() && ResourceVersionOf(*old->second) == ResourceVersionOf(*object)) {
        continue;
      }
      changed.push_back(key);
      UpsertLocked(key, std::move(object));
    }
    stream.resource_version = (*list)["metadata"]["resourceVersion"].get<std::string>();
    stream.synced = true;
    ++stream.list_count;
  }
  Notify(changed);
  return absl::OkStatus();
}

absl::Status Informer::WatchOnce(Stream& stream, int* events) {
  WatchOptions watch;
  watch.label_selector = options_.label_selector;
  watch.field_selector = options_.field_selector;
  watch.allow_watch_bookmarks = true;
  {
    absl::MutexLock lock(&mu_);
    watch.resource_version = stream.resource_version;
  }
  watch.timeout = options_.min_watch_timeout * (1.0 + random_->Uniform01());
  const std::string where = absl::StrCat("WATCH ", stream.resource.CollectionPath());
  return client_->Watch(
      stream.resource, watch,
      [&](WatchEvent& event) -> absl::Status {
        ++*events;
        const std::string rv = ResourceVersionOf(event.object);
        if (event.type == "BOOKMARK") {
          absl::MutexLock lock(&mu_);
          if (!rv.empty()) stream.resource_version = rv;
          stream.last_error = absl::OkStatus();  // the watch is healthy again
          return absl::OkStatus();
        }
        if (event.type != "ADDED" && event.type != "MODIFIED" && event.type != "DELETED") {
          return absl::DataLossError(absl::StrCat(where, ": unknown event type '", event.type, "'"));
        }
        const std::string key = ObjectKey(event.object);
        if (key.empty()) {
          return absl::DataLossError(absl::StrCat(where, ": ", event.type, " event for an object without a name"));
        }
        {
          absl::MutexLock lock(&mu_);
          if (event.type == "DELETED") {
            RemoveLocked(key);
          } else {
            UpsertLocked(key, std::make_shared<const json>(std::move(event.object)));
          }
          if (!rv.empty()) stream.resource_version = rv;
          stream.last_error = absl::OkStatus();
        }
        Notify({key});
        return absl::OkStatus();
      },
      &stream.cancel);
}

void Informer::Run(Stream& stream) {
  JitteredBackoff backoff(options_.backoff);
  bool need_list = true;
  while (!Stopping()) {
    if (need_list) {
      absl::Status listed = ListAndReplace(stream);
      if (!listed.ok()) {
        SetError(stream, listed);
        if (!Pause(backoff.Next(clock_->Now(), *random_))) return;
        continue;
      }
      SetError(stream, absl::OkStatus());
      need_list = false;
    }
    const absl::Time watch_start = clock_->Now();
    int events = 0;
    absl::Status watched = WatchOnce(stream, &events);
    if (Stopping()) return;
    if (watched.ok()) {
      SetError(stream, absl::OkStatus());
      // A watch that the server closes at once, empty, would otherwise spin.
      if (events == 0 && clock_->Now() - watch_start < absl::Seconds(1)) {
        if (!Pause(backoff.Next(clock_->Now(), *random_))) return;
      }
      continue;
    }
    SetError(stream, watched);
    if (IsExpired(watched)) {
      need_list = true;  // the resourceVersion is compacted away: start over at once
      continue;
    }
    // A broken connection resumes from the last resourceVersion; anything else
    // (forbidden, garbled stream, server error) starts over with a fresh list.
    if (watched.code() != absl::StatusCode::kUnavailable) need_list = true;
    if (!Pause(backoff.Next(clock_->Now(), *random_))) return;
  }
}

}  // namespace peregrine::kube
