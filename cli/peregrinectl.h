// peregrinectl (also installed as the kubectl plugin kubectl-peregrine): the
// command-line tool. Subcommands:
//   status [NAMESPACE/]NAME            machines, ranks, phase, conditions, latest incidents
//   incidents [NAMESPACE/]NAME         every incident of a job
//   timeline [NAMESPACE/]NAME          the job's Kubernetes Events and incident times
//   inject KIND [NAMESPACE/]NAME ...   inject a fault into a running local job
//   update [NAMESPACE/]NAME --revision R [--image I] [--command ARGV] [--urgent]
//                                      hot code update of a running job (code_update.h)
//   analyze ...                        offline analysis (analyze/)
// It talks to the controller's HTTP API, found with --controller URL, or
// --state-dir DIR (the controller writes DIR/controller.json), or the default state dir
// .peregrine/<namespace>-<name> when it exists; otherwise, with a kubeconfig, to the
// Kubernetes API server as the kubeconfig's user (kube_commands.h).
//
// RunPeregrinectl is the whole tool as a function so tests drive it without a process.
// Thread-compatible.
#ifndef PEREGRINE_CLI_PEREGRINECTL_H_
#define PEREGRINE_CLI_PEREGRINECTL_H_

#include <ostream>
#include <string>
#include <vector>

namespace peregrine {

// args excludes argv[0]. Returns the exit code: 0 ok, 1 the controller or the API server
// said no (or could not be reached), 2 usage.
int RunPeregrinectl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_PEREGRINECTL_H_
