// Test-side HTTP helpers for the kube_api_server suite: a JSON request helper and a
// watch stream reader, both driving FakeKubeApiServer over real HTTP the way a
// Kubernetes client would.
//
// WatchStream runs one watch request on its own thread and collects the decoded
// newline-delimited WatchEvents; its destructor ends the request and joins the thread
// even when a test fails midway. Thread-safe.
#ifndef PEREGRINE_TESTS_KUBE_API_SERVER_TEST_CLIENT_H_
#define PEREGRINE_TESTS_KUBE_API_SERVER_TEST_CLIENT_H_

#include <httplib.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace peregrine::testing {

// Deadline for waiting on a condition: generous, so only a broken test reaches it.
inline constexpr absl::Duration kWaitDeadline = absl::Seconds(60);

// Polls `condition` until it holds or kWaitDeadline passes; returns whether it held.
template <typename Condition>
bool WaitUntil(Condition condition) {
  absl::Time deadline = absl::Now() + kWaitDeadline;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

struct ApiReply {
  int code = 0;  // 0 when the request itself failed
  nlohmann::json body;
};

class ApiClient {
 public:
  explicit ApiClient(int port) : client_("127.0.0.1", port) {
    client_.set_read_timeout(60, 0);
  }
  ApiReply Get(const std::string& path) { return Decode(client_.Get(path.c_str())); }
  ApiReply Post(const std::string& path, const nlohmann::json& body) {
    return Decode(client_.Post(path.c_str(), body.dump(), "application/json"));
  }
  ApiReply Put(const std::string& path, const nlohmann::json& body) {
    return Decode(client_.Put(path.c_str(), body.dump(), "application/json"));
  }
  ApiReply Patch(const std::string& path, const nlohmann::json& body,
                 const std::string& type = "application/merge-patch+json") {
    return Decode(client_.Patch(path.c_str(), body.dump(), type.c_str()));
  }
  ApiReply Delete(const std::string& path, const nlohmann::json& options = nullptr) {
    if (options.is_null()) return Decode(client_.Delete(path.c_str()));
    return Decode(client_.Delete(path.c_str(), options.dump(), "application/json"));
  }
  ApiReply Raw(const std::string& method, const std::string& path, const std::string& body) {
    if (method == "POST") return Decode(client_.Post(path.c_str(), body, "application/json"));
    return Decode(client_.Put(path.c_str(), body, "application/json"));
  }

 private:
  static ApiReply Decode(const httplib::Result& result) {
    if (!result) return {};
    return {result->status, nlohmann::json::parse(result->body, nullptr, false)};
  }
  httplib::Client client_;
};

class WatchStream {
 public:
  WatchStream(int port, std::string path, httplib::Headers headers = {})
      : client_("127.0.0.1", port) {
    client_.set_read_timeout(300, 0);
    thread_ = std::thread([this, path = std::move(path), headers = std::move(headers)] {
      Run(path, headers);
    });
  }
  ~WatchStream() {
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
    }
    // Client::stop() only acts on an open socket, so repeat it until the request ends.
    for (;;) {
      client_.stop();
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&ended_), absl::Milliseconds(20))) break;
    }
    thread_.join();
  }

  // Waits until at least `n` events arrived or the stream ended; returns all so far.
  std::vector<nlohmann::json> WaitForEvents(size_t n) {
    absl::MutexLock lock(&mu_);
    auto ready = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return events_.size() >= n || ended_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), kWaitDeadline);
    return events_;
  }
  // Waits until the server ends the stream; returns whether it did.
  bool WaitForEnd() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&ended_), kWaitDeadline);
  }
  int http_status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  std::string content_type() {
    absl::MutexLock lock(&mu_);
    return content_type_;
  }
  // True when the stream ended with its terminating chunk (a clean end of the watch).
  bool ended_cleanly() {
    absl::MutexLock lock(&mu_);
    return clean_;
  }

 private:
  void Run(const std::string& path, const httplib::Headers& headers) {
    std::string buffer;
    httplib::Result result = client_.Get(
        path.c_str(), headers,
        [this](const httplib::Response& response) {
          absl::MutexLock lock(&mu_);
          status_ = response.status;
          content_type_ = response.get_header_value("Content-Type");
          return true;
        },
        [this, &buffer](const char* data, size_t size) {
          buffer.append(data, size);
          absl::MutexLock lock(&mu_);
          for (size_t pos; (pos = buffer.find('\n')) != std::string::npos;) {
            events_.push_back(nlohmann::json::parse(buffer.substr(0, pos), nullptr, false));
            buffer.erase(0, pos + 1);
          }
          return !closing_;
        });
    absl::MutexLock lock(&mu_);
    clean_ = static_cast<bool>(result);
    ended_ = true;
  }

  httplib::Client client_;
  absl::Mutex mu_;
  std::vector<nlohmann::json> events_ ABSL_GUARDED_BY(mu_);
  int status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string content_type_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool clean_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_KUBE_API_SERVER_TEST_CLIENT_H_
