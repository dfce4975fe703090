#!/usr/bin/env bash
# The dependency rule (docs/architecture.md), checked on every #include of the tree:
# each folder may include only the folders it is allowed to use, and the pure core may
# include no wire format, I/O, thread or clock header. Prints every violation as
# "file:line: <folder> may not include <header> (<why>)" and exits 1 when there is one.
# CTest runs it as the test `dependency_rule`.
#
# Usage: scripts/check-deps.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "${root}"

# Folder (longest prefix wins) -> the include prefixes it may use besides its own folder.
# "peregrine/v1/" is the generated gRPC/protobuf code of proto/.
declare -A allowed=(
  [base]=""
  [proto/api]=""
  [diagnosis]=""
  [diagnosis/tools]="diagnosis/"
  [checkpoint]="diagnosis/ proto/ peregrine/v1/"
  [client]="checkpoint/"
  [controller/core]="diagnosis/ checkpoint/"
  [controller]="base/ controller/core/ proto/ peregrine/v1/ diagnosis/ checkpoint/"
  [controller/kube]="base/ controller/ controller/core/ proto/ peregrine/v1/ diagnosis/ checkpoint/"
  [controller/local]="base/ controller/ controller/core/ proto/ peregrine/v1/ diagnosis/ checkpoint/ sim/fault/"
  [cli]="base/fnv1a.h diagnosis/ proto/api/ agent/nccl_ring/"
  [agent/nccl_ring]="base/fnv1a.h diagnosis/"
  [agent/nccl_hook]="agent/nccl_ring/"
  [agent/checkpoint]="base/ checkpoint/ proto/ peregrine/v1/"
  [agent]="base/ proto/ peregrine/v1/ diagnosis/ checkpoint/ agent/nccl_ring/ agent/checkpoint/ client/microbatch_plan_format.h"
  [node_inspector]="base/ agent/inspection/ controller/kube/rest_client.h controller/kube/config.h controller/kube/node_findings.h"
  [fleetsim]="base/ controller/core/ diagnosis/ checkpoint/"
  [sim]="base/fnv1a.h diagnosis/parallel_layout.h diagnosis/tools/nccl_rendezvous.h diagnosis/tools/standin_device.h client/peregrine_client.h client/checkpoint_client.h"
)
# Files that wire the adapters together (main): they may also use these.
declare -A main_extra=(
  [controller/controller_main.cc]="controller/kube/ controller/local/"
)
# Headers the pure code (controller/core, diagnosis) must not include: wire formats, I/O,
# threads and clocks.
impure='^(<(thread|mutex|shared_mutex|condition_variable|future|chrono|fstream|filesystem|sys/socket\.h|netinet/.*|unistd\.h|grpcpp/.*|httplib\.h|yaml-cpp/.*|nlohmann/.*|prometheus/.*)>|"(absl/synchronization/|absl/time/clock\.h|peregrine/v1/|proto/))'
# Our top-level folders: an include starting with one of these is one of ours.
ours='^(base|fleetsim|node_inspector|proto|diagnosis|checkpoint|client|controller|cli|agent|sim|tests|bench|peregrine/v1)/'

# Sets `folder` to the longest key of `allowed` that is a folder prefix of $1 (no
# subshell: the script runs it for every include of the tree).
declare -A folder_cache=()
folder_of() {
  local f="$1" dir="${1%/*}" best=""
  if [[ -v folder_cache[$dir] ]]; then
    folder="${folder_cache[$dir]}"
    return
  fi
  for k in "${!allowed[@]}"; do
    if [[ "$f" == "$k/"* && ${#k} -gt ${#best} ]]; then best="$k"; fi
  done
  folder_cache[$dir]="$best"
  folder="$best"
}

violations=0
report() {
  echo "$1"
  violations=$((violations + 1))
}

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cc' '*.c' | sort)
else
  mapfile -t files < <(find . -path ./build -prune -o \( -name '*.h' -o -name '*.cc' -o -name '*.c' \) -print | sed 's|^\./||' | sort)
fi

for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  folder_of "$f"
  [ -n "$folder" ] || continue  # tests/, bench/, examples/: anything
  pure=0
  case "$folder" in controller/core | diagnosis) pure=1 ;; esac
  own="$folder/"
  own_folder="$folder"
  # controller/ owns only its top-level files; its subfolders are other folders.
  while IFS=: read -r line text; do
    [[ "$text" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*([^[:space:]]*) ]]
    header="${BASH_REMATCH[1]}"
    name="${header:1:${#header}-2}"
    if ((pure)) && [[ "$header" =~ $impure ]]; then
      report "$f:$line: $folder is pure and may not include $header (no wire formats, I/O, threads or clocks)"
      continue
    fi
    [[ "$header" == \"* ]] || continue
    [[ "$name" =~ $ours ]] || continue
    ok=0
    if [[ "$name" == "$own"* ]]; then
      # Inside its own folder, but a subfolder that is a folder of its own is not "own".
      folder_of "$name"
      sub="$folder"
      folder="$own_folder"
      [[ "$sub" == "$folder" ]] && ok=1
    fi
    for p in ${allowed[$folder]} ${main_extra[$f]:-}; do
      if [[ "$p" == */ ]]; then
        if [[ "$name" == "$p"* ]]; then
          # "controller/" means controller's own top-level files, not its subfolders.
          folder_of "$name"
          sub="$folder"
          folder="$own_folder"
          if [[ "$p" == "controller/" && "$sub" != "controller" ]]; then continue; fi
          ok=1
        fi
      elif [[ "$name" == "$p" ]]; then
        ok=1
      fi
    done
    ((ok)) || report "$f:$line: $folder may not include $name (allowed: its own folder ${allowed[$folder]} ${main_extra[$f]:-})"
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include' "$f" || true)
done

if ((violations)); then
  echo "dependency rule: ${violations} violation(s); the rule is in docs/architecture.md" >&2
  exit 1
fi
echo "dependency rule: ${#files[@]} files checked, no violation"
