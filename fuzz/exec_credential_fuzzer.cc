// Fuzzes what a kubeconfig user's exec credential plugin prints (cli/exec_credential.h):
// the input is the plugin's stdout, read against a v1 and a v1beta1 stanza; the first line,
// when it is JSON, is also tried as the kubeconfig's exec stanza and as a cluster object.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "cli/exec_credential.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  peregrine::ExecConfig v1;
  v1.api_version = "client.authentication.k8s.io/v1";
  v1.command = "plugin";
  v1.interactive_mode = "Never";
  peregrine::ExecConfig beta = v1;
  beta.api_version = "client.authentication.k8s.io/v1beta1";
  (void)peregrine::ParseExecCredential(text, v1, "fuzz");
  (void)peregrine::ParseExecCredential(text, beta, "fuzz");
  const nlohmann::json stanza = nlohmann::json::parse(text.substr(0, text.find('\n')), nullptr, false);
  if (!stanza.is_discarded()) {
    auto config = peregrine::ParseExecConfig(stanza, "fuzz");
    if (config.ok()) {
      config->provide_cluster_info = true;
      (void)peregrine::ExecInfo(*config, stanza);
    }
  }
  return 0;
}
