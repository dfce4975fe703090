#include "controller/kube/rest_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include <httplib.h>
#include <openssl/x509.h>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine::kube {
namespace {

using nlohmann::json;

constexpr absl::string_view kReasonPayload = "peregrine.dev/kube-reason";
constexpr absl::string_view kHttpCodePayload = "peregrine.dev/http-code";
constexpr absl::string_view kRetryAfterPayload = "peregrine.dev/retry-after-ms";

std::string Escape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

void AddQuery(std::string& query, absl::string_view key, absl::string_view value) {
  if (value.empty()) return;
  absl::StrAppend(&query, query.empty() ? "?" : "&", key, "=", Escape(value));
}

std::string ReasonForCode(int code) {
  switch (code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 405: return "MethodNotAllowed";
    case 409: return "Conflict";
    case 410: return "Expired";
    case 415: return "UnsupportedMediaType";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "Unknown";
  }
}

absl::StatusCode CodeFor(int http_code, absl::string_view reason) {
  if (reason == "Expired" || reason == "Gone") return absl::StatusCode::kOutOfRange;
  switch (http_code) {
    case 400:
    case 413:
    case 415:
    case 422: return absl::StatusCode::kInvalidArgument;
    case 401: return absl::StatusCode::kUnauthenticated;
    case 403: return absl::StatusCode::kPermissionDenied;
    case 404: return absl::StatusCode::kNotFound;
    case 405: return absl::StatusCode::kUnimplemented;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410: return absl::StatusCode::kOutOfRange;
    case 429: return absl::StatusCode::kUnavailable;
    default: break;
  }
  if (http_code >= 500) return absl::StatusCode::kUnavailable;
  return absl::StatusCode::kUnknown;
}

std::optional<absl::Duration> ParseRetryAfter(const std::string& value) {
  int seconds = 0;
  if (value.empty() || !absl::SimpleAtoi(value, &seconds) || seconds < 0) return std::nullopt;
  return absl::Seconds(seconds);
}

struct ServerAddress {
  bool tls = false;
  std::string host;
  int port = 0;
  std::string base_path;  // "" or "/prefix"
};

absl::StatusOr<ServerAddress> ParseServer(const std::string& server) {
  ServerAddress address;
  absl::string_view rest = server;
  if (absl::ConsumePrefix(&rest, "https://")) {
    address.tls = true;
    address.port = 443;
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    address.port = 80;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("server '", server, "' is not an http(s) URL"));
  }
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos) {
    address.base_path = std::string(rest.substr(slash));
    while (!address.base_path.empty() && address.base_path.back() == '/') address.base_path.pop_back();
  }
  absl::string_view port_text;
  if (absl::StartsWith(authority, "[")) {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("server '", server, "' has an unclosed '['"));
    }
    address.host = std::string(authority.substr(1, close - 1));
    absl::string_view after = authority.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":")) port_text = after;
  } else {
    const size_t colon = authority.rfind(':');
    address.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (address.host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("server '", server, "' has no host"));
  }
  if (!port_text.empty() &&
      (!absl::SimpleAtoi(port_text, &address.port) || address.port <= 0 || address.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("server '", server, "' has a bad port"));
  }
  return address;
}

// Writes `content` to a new file readable by the owner only.
absl::Status WritePrivateFile(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create '", path, "'"));
  size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n <= 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
    }
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

void SleepOn(Clock* clock, absl::Duration d) {
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  const absl::Time deadline = clock->Now() + d;
  while (!clock->WaitWithDeadline(cv, mu, deadline)) {
  }
}

struct HttpResult {
  int code = 0;  // 0: no response
  std::string body;
  std::optional<absl::Duration> retry_after;
  std::string transport_error;
};

}  // namespace

// ---------------------------------------------------------------------------------------
// ResourcePath, errors, keys.

std::string ResourcePath::CollectionPath() const {
  std::string path = group.empty() ? absl::StrCat("/api/", version)
                                   : absl::StrCat("/apis/", group, "/", version);
  if (!namespace_name.empty()) absl::StrAppend(&path, "/namespaces/", Escape(namespace_name));
  absl::StrAppend(&path, "/", plural);
  return path;
}

std::string ResourcePath::ObjectPath(absl::string_view name, absl::string_view subresource) const {
  std::string path = absl::StrCat(CollectionPath(), "/", Escape(name));
  if (!subresource.empty()) absl::StrAppend(&path, "/", subresource);
  return path;
}

absl::Status StatusFromHttp(int http_code, absl::string_view body, absl::string_view request,
                            std::optional<absl::Duration> retry_after) {
  std::string reason;
  std::string message;
  const json parsed = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    if (auto it = parsed.find("reason"); it != parsed.end() && it->is_string()) reason = *it;
    if (auto it = parsed.find("message"); it != parsed.end() && it->is_string()) message = *it;
  }
  if (reason.empty()) reason = ReasonForCode(http_code);
  if (message.empty()) message = std::string(body.substr(0, 512));
  absl::Status status(CodeFor(http_code, reason),
                      absl::StrCat(request, ": HTTP ", http_code, " ", reason,
                                   message.empty() ? "" : ": ", message));
  status.SetPayload(kReasonPayload, absl::Cord(reason));
  status.SetPayload(kHttpCodePayload, absl::Cord(absl::StrCat(http_code)));
  if (retry_after.has_value()) {
    status.SetPayload(kRetryAfterPayload,
                      absl::Cord(absl::StrCat(absl::ToInt64Milliseconds(*retry_after))));
  }
  return status;
}

std::string KubeReason(const absl::Status& status) {
  auto reason = status.GetPayload(kReasonPayload);
  return reason.has_value() ? std::string(*reason) : std::string();
}

int HttpCode(const absl::Status& status) {
  auto code = status.GetPayload(kHttpCodePayload);
  int value = 0;
  if (code.has_value() && absl::SimpleAtoi(std::string(*code), &value)) return value;
  return 0;
}

std::optional<absl::Duration> RetryAfter(const absl::Status& status) {
  auto ms = status.GetPayload(kRetryAfterPayload);
  int64_t value = 0;
  if (ms.has_value() && absl::SimpleAtoi(std::string(*ms), &value)) {
    return absl::Milliseconds(value);
  }
  return std::nullopt;
}

std::string ObjectKey(const json& object) {
  if (!object.is_object()) return "";
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return "";
  auto name = meta->find("name");
  if (name == meta->end() || !name->is_string()) return "";
  auto ns = meta->find("namespace");
  if (ns != meta->end() && ns->is_string() && !ns->get_ref<const std::string&>().empty()) {
    return absl::StrCat(ns->get_ref<const std::string&>(), "/", name->get_ref<const std::string&>());
  }
  return *name;
}

// ---------------------------------------------------------------------------------------
// CancelToken.

void CancelToken::Cancel() {
  std::function<void()> abort;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    abort = abort_;
  }
  if (abort) abort();
}

bool CancelToken::IsCancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void CancelToken::Reset() {
  absl::MutexLock lock(&mu_);
  cancelled_ = false;
  abort_ = nullptr;
}

bool CancelToken::InstallAbortForRequest(std::function<void()> abort) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  abort_ = std::move(abort);
  return true;
}

void CancelToken::ClearAbortForRequest() {
  absl::MutexLock lock(&mu_);
  abort_ = nullptr;
}

// ---------------------------------------------------------------------------------------
// RestClient::Impl.

class RestClient::Impl {
 public:
  Impl(Config config, RestClientOptions options, ServerAddress address)
      : config_(std::move(config)),
        options_(std::move(options)),
        address_(std::move(address)),
        clock_(options_.clock != nullptr ? options_.clock : RealClock()) {
    token_ = config_.bearer_token;
  }

  ~Impl() {
    for (const std::string& file : staged_files_) ::unlink(file.c_str());
    if (!staging_dir_.empty()) ::rmdir(staging_dir_.c_str());
  }

  // Stages PEM material as private files (httplib loads TLS files by path).
  absl::Status StageTlsFiles() {
    if (!address_.tls) return absl::OkStatus();
    if (config_.ca_pem.empty() && config_.client_certificate_pem.empty()) return absl::OkStatus();
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                       "/peregrine-kube-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a private directory for TLS material (",
                                              pattern, ")"));
    }
    staging_dir_ = pattern;
    auto stage = [&](const std::string& pem, const char* name, std::string* path) -> absl::Status {
      if (pem.empty()) return absl::OkStatus();
      *path = absl::StrCat(staging_dir_, "/", name);
      absl::Status s = WritePrivateFile(*path, pem);
      if (s.ok()) staged_files_.push_back(*path);
      return s;
    };
    if (absl::Status s = stage(config_.ca_pem, "ca.crt", &ca_path_); !s.ok()) return s;
    if (absl::Status s = stage(config_.client_certificate_pem, "client.crt", &cert_path_); !s.ok()) {
      return s;
    }
    return stage(config_.client_key_pem, "client.key", &key_path_);
  }

  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> NewConnection(absl::Duration read_timeout) {
    std::unique_ptr<httplib::ClientImpl> client;
    if (address_.tls) {
      auto ssl = cert_path_.empty()
                     ? std::make_unique<httplib::SSLClient>(address_.host, address_.port)
                     : std::make_unique<httplib::SSLClient>(address_.host, address_.port,
                                                            cert_path_, key_path_);
      if (!ssl->is_valid()) {
        return absl::InvalidArgumentError(absl::StrCat(
            config_.source, ": the client certificate or key was rejected by OpenSSL"));
      }
      if (!ca_path_.empty()) ssl->set_ca_cert_path(ca_path_);
      ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
      client = std::move(ssl);
    } else {
      client = std::make_unique<httplib::ClientImpl>(address_.host, address_.port);
    }
    client->set_keep_alive(true);
    client->set_url_encode(false);
    client->set_follow_location(false);
    // cpp-httplib writes a request's headers and its body in two writes: with Nagle's
    // algorithm on, the body waits for the server's (delayed) ACK of the headers, up to
    // 40 ms on Linux for every request with a body. Go's net/http sets it too.
    client->set_tcp_nodelay(true);
    client->set_connection_timeout(absl::ToChronoMicroseconds(options_.connect_timeout));
    client->set_read_timeout(absl::ToChronoMicroseconds(read_timeout));
    client->set_write_timeout(absl::ToChronoMicroseconds(options_.request_timeout));
    return client;
  }

  // An idle pooled connection when there is one (*reused = true), else a new one.
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> AcquireConnection(bool* reused) {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        auto client = std::move(idle_.back());
        idle_.pop_back();
        *reused = true;
        return client;
      }
    }
    *reused = false;
    return NewConnection(options_.request_timeout);
  }

  void ReleaseConnection(std::unique_ptr<httplib::ClientImpl> client) {
    absl::MutexLock lock(&mu_);
    if (static_cast<int>(idle_.size()) < options_.max_idle_connections) {
      idle_.push_back(std::move(client));
    }
  }

  std::string CurrentToken() {
    absl::MutexLock lock(&mu_);
    if (!config_.bearer_token_file.empty()) {
      const absl::Time now = clock_->Now();
      if (token_read_at_ == absl::InfinitePast() ||
          now - token_read_at_ >= options_.token_file_refresh) {
        token_read_at_ = now;
        std::ifstream in(config_.bearer_token_file);
        std::ostringstream text;
        text << in.rdbuf();
        const std::string token(absl::StripAsciiWhitespace(text.str()));
        // A failed re-read keeps the last good token.
        if (in && !token.empty()) token_ = token;
      }
    }
    return token_;
  }

  httplib::Headers BaseHeaders() {
    httplib::Headers headers = {{"Accept", "application/json"},
                                {"User-Agent", options_.user_agent}};
    const std::string token = CurrentToken();
    if (!token.empty()) headers.emplace("Authorization", absl::StrCat("Bearer ", token));
    return headers;
  }

  HttpResult SendOnce(const std::string& method, const std::string& target, const std::string& body,
                      const std::string& content_type) {
    HttpResult result;
    bool reused = false;
    absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> client = AcquireConnection(&reused);
    if (!client.ok()) {
      result.transport_error = std::string(client.status().message());
      return result;
    }
    httplib::Request request;
    request.method = method;
    request.path = target;
    request.headers = BaseHeaders();
    if (!content_type.empty()) {
      request.headers.emplace("Content-Type", content_type);
      request.body = body;
    }
    httplib::Result response = (*client)->send(request);
    // A pooled keep-alive connection the server has closed meanwhile (idle timeout, or
    // after an error response) fails without a response: the request goes again once on a
    // new connection when the server cannot have acted on it (the write failed) or when
    // repeating it is harmless (GET, PUT, DELETE), as Go's net/http does for client-go.
    if (!response && reused &&
        (response.error() == httplib::Error::Write || method == "GET" || method == "PUT" || method == "DELETE")) {
      client = NewConnection(options_.request_timeout);
      if (!client.ok()) {
        result.transport_error = std::string(client.status().message());
        return result;
      }
      response = (*client)->send(request);
    }
    if (!response) {
      result.transport_error = TransportError(client->get(), response.error());
      return result;  // the connection is dropped, not pooled
    }
    result.code = response->status;
    result.body = std::move(response->body);
    if (response->has_header("Retry-After")) {
      result.retry_after = ParseRetryAfter(response->get_header_value("Retry-After"));
    }
    ReleaseConnection(*std::move(client));
    return result;
  }

  // What went wrong below HTTP, with what to check for TLS verification failures.
  std::string TransportError(httplib::ClientImpl* client, httplib::Error error) const {
    std::string text = httplib::to_string(error);
    if (error != httplib::Error::SSLServerVerification) return text;
    auto* ssl = dynamic_cast<httplib::SSLClient*>(client);
    const long verify = ssl != nullptr ? ssl->get_openssl_verify_result() : X509_V_OK;
    const std::string why = verify != X509_V_OK
                                ? X509_verify_cert_error_string(verify)
                                : absl::StrCat("the certificate does not name host ", address_.host);
    return absl::StrCat(text, " (", why, "; check certificate-authority(-data) of ", config_.source,
                        ", or set insecure-skip-tls-verify)");
  }

  absl::StatusOr<json> Do(absl::string_view verb, const std::string& resource,
                          const std::string& method, const std::string& path,
                          const std::string& query, const std::string& body = "",
                          const std::string& content_type = "") {
    const std::string target = absl::StrCat(address_.base_path, path, query);
    const std::string request = absl::StrCat(verb, " ", path, query);
    for (int attempt = 0;; ++attempt) {
      const absl::Time start = clock_->Now();
      HttpResult result = SendOnce(method, target, body, content_type);
      if (options_.observer != nullptr) {
        options_.observer->OnRequestDone(verb, resource, result.code, clock_->Now() - start);
      }
      if (result.code == 0) {
        return absl::UnavailableError(
            absl::StrCat(request, ": no response from ", config_.server, ": ", result.transport_error));
      }
      if (result.code >= 200 && result.code < 300) {
        if (result.body.empty()) return json::object();
        json parsed = json::parse(result.body, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) {
          return absl::DataLossError(absl::StrCat(request, ": HTTP ", result.code,
                                                  " with a body that is not JSON"));
        }
        return parsed;
      }
      if ((result.code == 429 || result.code == 503) && result.retry_after.has_value() &&
          attempt < options_.max_retry_after_attempts) {
        SleepOn(clock_, std::min(*result.retry_after, options_.max_retry_after));
        continue;
      }
      return StatusFromHttp(result.code, result.body, request, result.retry_after);
    }
  }

  absl::Status Watch(const ResourcePath& path, const WatchOptions& options,
                     const WatchHandler& handler, CancelToken* cancel) {
    std::string query;
    AddQuery(query, "watch", "true");
    AddQuery(query, "resourceVersion", options.resource_version);
    if (options.allow_watch_bookmarks) AddQuery(query, "allowWatchBookmarks", "true");
    AddQuery(query, "labelSelector", options.label_selector);
    AddQuery(query, "fieldSelector", options.field_selector);
    const int64_t timeout_seconds = std::max<int64_t>(1, absl::ToInt64Seconds(options.timeout));
    AddQuery(query, "timeoutSeconds", absl::StrCat(timeout_seconds));
    const std::string request = absl::StrCat("WATCH ", path.CollectionPath(), query);

    // A watch gets its own connection; the read timeout outlasts the server's timeout.
    absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> client =
        NewConnection(absl::Seconds(timeout_seconds) + options_.request_timeout);
    if (!client.ok()) return client.status();
    httplib::ClientImpl* raw = client->get();
    if (cancel != nullptr && !cancel->InstallAbortForRequest([raw] { raw->stop(); })) {
      return absl::CancelledError(absl::StrCat(request, ": cancelled"));
    }

    int code = 0;
    std::optional<absl::Duration> retry_after;
    std::string error_body;
    std::string buffer;
    absl::Status stream_status;  // first failure inside the stream

    auto deliver_line = [&](absl::string_view line) -> bool {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty()) return true;
      json parsed = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_object() || !parsed.contains("type") || !parsed["type"].is_string()) {
        stream_status = absl::DataLossError(
            absl::StrCat(request, ": malformed watch event: ", line.substr(0, 200)));
        return false;
      }
      WatchEvent event;
      event.type = parsed["type"].get<std::string>();
      event.object = std::move(parsed["object"]);
      if (event.type == "ERROR") {
        int error_code = 500;
        if (event.object.is_object()) {
          auto it = event.object.find("code");
          if (it != event.object.end() && it->is_number_integer()) error_code = it->get<int>();
        }
        stream_status = StatusFromHttp(error_code, event.object.dump(), request);
        return false;
      }
      stream_status = handler(event);
      if (!stream_status.ok()) return false;
      if (cancel != nullptr && cancel->IsCancelled()) {
        stream_status = absl::CancelledError(absl::StrCat(request, ": cancelled"));
        return false;
      }
      return true;
    };

    httplib::Headers headers = BaseHeaders();
    const absl::Time start = clock_->Now();
    httplib::Result result = raw->Get(
        absl::StrCat(address_.base_path, path.CollectionPath(), query), headers,
        [&](const httplib::Response& response) {
          code = response.status;
          if (response.has_header("Retry-After")) {
            retry_after = ParseRetryAfter(response.get_header_value("Retry-After"));
          }
          return true;
        },
        [&](const char* data, size_t length) {
          if (code != 200) {
            if (error_body.size() < 64 * 1024) error_body.append(data, length);
            return true;
          }
          buffer.append(data, length);
          size_t begin = 0;
          while (true) {
            const size_t newline = buffer.find('\n', begin);
            if (newline == std::string::npos) break;
            const bool keep_going =
                deliver_line(absl::string_view(buffer).substr(begin, newline - begin));
            begin = newline + 1;
            if (!keep_going) return false;
          }
          buffer.erase(0, begin);
          return true;
        });
    if (cancel != nullptr) cancel->ClearAbortForRequest();
    if (options_.observer != nullptr) {
      options_.observer->OnRequestDone("WATCH", path.plural, code, clock_->Now() - start);
    }
    if (!stream_status.ok()) return stream_status;
    if (cancel != nullptr && cancel->IsCancelled()) {
      return absl::CancelledError(absl::StrCat(request, ": cancelled"));
    }
    if (code != 0 && code != 200) return StatusFromHttp(code, error_body, request, retry_after);
    if (!result) {
      return absl::UnavailableError(absl::StrCat(request, ": watch stream broken: ",
                                                 httplib::to_string(result.error())));
    }
    // A last event without a trailing newline.
    if (!deliver_line(buffer) && !stream_status.ok()) return stream_status;
    return absl::OkStatus();
  }

  const Config& config() const { return config_; }

 private:
  const Config config_;
  const RestClientOptions options_;
  const ServerAddress address_;
  Clock* const clock_;
  std::string staging_dir_;
  std::vector<std::string> staged_files_;
  std::string ca_path_;
  std::string cert_path_;
  std::string key_path_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<httplib::ClientImpl>> idle_ ABSL_GUARDED_BY(mu_);
  std::string token_ ABSL_GUARDED_BY(mu_);
  absl::Time token_read_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// ---------------------------------------------------------------------------------------
// RestClient.

absl::StatusOr<std::unique_ptr<RestClient>> RestClient::Create(const Config& config,
                                                               RestClientOptions options) {
  absl::StatusOr<ServerAddress> address = ParseServer(config.server);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.source.empty() ? "config" : config.source, ": ", address.status().message()));
  }
  auto impl = std::make_unique<Impl>(config, std::move(options), *std::move(address));
  if (absl::Status s = impl->StageTlsFiles(); !s.ok()) return s;
  return std::unique_ptr<RestClient>(new RestClient(std::move(impl)));
}

RestClient::RestClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestClient::~RestClient() = default;

const std::string& RestClient::server() const { return impl_->config().server; }

absl::StatusOr<json> RestClient::Get(const ResourcePath& path, absl::string_view name,
                                     absl::string_view subresource) {
  return impl_->Do("GET", path.plural, "GET", path.ObjectPath(name, subresource), "");
}

absl::StatusOr<json> RestClient::List(const ResourcePath& path, const ListOptions& options) {
  json items = json::array();
  std::string resource_version;
  std::string continue_token;
  do {
    std::string query;
    AddQuery(query, "labelSelector", options.label_selector);
    AddQuery(query, "fieldSelector", options.field_selector);
    if (options.page_size > 0) AddQuery(query, "limit", absl::StrCat(options.page_size));
    if (continue_token.empty()) {
      AddQuery(query, "resourceVersion", options.resource_version);
    } else {
      AddQuery(query, "continue", continue_token);
    }
    absl::StatusOr<json> page = impl_->Do("LIST", path.plural, "GET", path.CollectionPath(), query);
    if (!page.ok()) return page.status();
    const std::string where = absl::StrCat("LIST ", path.CollectionPath());
    if (!page->is_object()) return absl::DataLossError(where + ": the response is not an object");
    auto page_items = page->find("items");
    if (page_items != page->end() && !page_items->is_null()) {
      if (!page_items->is_array()) return absl::DataLossError(where + ": 'items' is not a list");
      for (json& item : *page_items) items.push_back(std::move(item));
    }
    continue_token.clear();
    auto meta = page->find("metadata");
    if (meta != page->end() && meta->is_object()) {
      if (auto rv = meta->find("resourceVersion"); rv != meta->end() && rv->is_string()) {
        resource_version = *rv;
      }
      if (auto next = meta->find("continue"); next != meta->end() && next->is_string()) {
        continue_token = *next;
      }
    }
  } while (!continue_token.empty());
  return json{{"metadata", {{"resourceVersion", resource_version}}}, {"items", std::move(items)}};
}

absl::Status RestClient::Watch(const ResourcePath& path, const WatchOptions& options,
                               const WatchHandler& handler, CancelToken* cancel) {
  return impl_->Watch(path, options, handler, cancel);
}

absl::StatusOr<json> RestClient::Create(const ResourcePath& path, const json& object) {
  return impl_->Do("CREATE", path.plural, "POST", path.CollectionPath(), "", object.dump(),
                   "application/json");
}

absl::StatusOr<json> RestClient::Update(const ResourcePath& path, absl::string_view name,
                                        const json& object) {
  return impl_->Do("UPDATE", path.plural, "PUT", path.ObjectPath(name), "", object.dump(),
                   "application/json");
}

absl::StatusOr<json> RestClient::UpdateStatus(const ResourcePath& path, absl::string_view name,
                                              const json& object) {
  return impl_->Do("UPDATE_STATUS", path.plural, "PUT", path.ObjectPath(name, "status"), "",
                   object.dump(), "application/json");
}

absl::StatusOr<json> RestClient::MergePatch(const ResourcePath& path, absl::string_view name,
                                            const json& patch, absl::string_view subresource) {
  return impl_->Do("PATCH", path.plural, "PATCH", path.ObjectPath(name, subresource), "",
                   patch.dump(), "application/merge-patch+json");
}

absl::Status RestClient::Delete(const ResourcePath& path, absl::string_view name,
                                const DeleteOptions& options) {
  json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (!options.precondition_uid.empty()) body["preconditions"]["uid"] = options.precondition_uid;
  if (!options.precondition_resource_version.empty()) {
    body["preconditions"]["resourceVersion"] = options.precondition_resource_version;
  }
  if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
  if (options.grace_period_seconds.has_value()) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  return impl_
      ->Do("DELETE", path.plural, "DELETE", path.ObjectPath(name), "", body.dump(),
           "application/json")
      .status();
}

absl::StatusOr<json> UpdateWithRetryOnConflict(
    RestClient& client, const ResourcePath& path, absl::string_view name, bool status_subresource,
    const std::function<absl::Status(json&)>& mutate, int max_attempts) {
  absl::Status last = absl::AbortedError("no attempt made");
  for (int attempt = 0; attempt < std::max(1, max_attempts); ++attempt) {
    absl::StatusOr<json> current = client.Get(path, name);
    if (!current.ok()) return current.status();
    if (absl::Status s = mutate(*current); !s.ok()) return s;
    absl::StatusOr<json> written = status_subresource ? client.UpdateStatus(path, name, *current)
                                                      : client.Update(path, name, *current);
    if (written.ok() || !IsConflict(written.status())) return written;
    last = written.status();
  }
  return absl::AbortedError(absl::StrCat("gave up after ", max_attempts,
                                         " conflicting updates: ", last.message()));
}

}  // namespace peregrine::kube
