// peregrinectl's Kubernetes backend: `status`, `incidents`, `timeline` and `update` of a
// TrainingJob through the API server with the kubeconfig user's credentials (the
// kubeconfig as kubectl reads it: --kubeconfig or $KUBECONFIG or ~/.kube/config,
// --context or the current context), for users who can reach the API server but not
// the controller's Service. The namespace is NAMESPACE/ of the job, else -n/--namespace,
// else the context's namespace, else "default".
//
//   status    the TrainingJob's .status (job_text.h)
//   incidents every incident of .status
//   timeline  the Events whose involvedObject is the job, with the incidents' times
//   update    a JSON merge patch of spec.codeVersion and the peregrine.dev/hot-update
//             annotation: what the controller's own update writes (docs/kubernetes.md,
//             "Updating the code of a running job"); the controller picks it up from the
//             spec like any kubectl edit.
//
// Exit codes as peregrinectl's: 0 done, 1 refused or failed (kubeconfig, API server,
// permissions, no such job), 2 usage. Messages go to `err`, prefixed "peregrinectl: ".
// Thread-compatible.
#ifndef PEREGRINE_CLI_KUBE_COMMANDS_H_
#define PEREGRINE_CLI_KUBE_COMMANDS_H_

#include <map>
#include <ostream>
#include <string>

namespace peregrine {

struct KubeCommandArgs {
  std::string kubeconfig;  // "" = kubectl's default
  std::string context;     // "" = current
  std::string namespace_;  // -n/--namespace; "" = the context's
  std::string token;       // --token/--token-file: replaces the kubeconfig user's token
  std::string command;     // status, incidents, timeline, update
  std::string job;         // [NAMESPACE/]NAME
  std::map<std::string, std::string> flags;  // the command's own flags (update's)
};

int RunKubeCommand(const KubeCommandArgs& args, std::ostream& out, std::ostream& err);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_KUBE_COMMANDS_H_
