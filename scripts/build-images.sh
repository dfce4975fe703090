#!/usr/bin/env bash
# Builds Peregrine's two container images from docker/Dockerfile, named as the Helm
# chart expects them (helm/peregrine/values.yaml: image.repository and
# agent.image.repository; an empty tag there means the chart's appVersion):
#
#   ${REGISTRY}/peregrine-controller:${TAG}   (--target controller)
#   ${REGISTRY}/peregrine-agent:${TAG}        (--target agent)
#
# REGISTRY defaults to ghcr.io/peregrine-dev and TAG to appVersion in
# helm/peregrine/Chart.yaml. Needs docker with BuildKit (the default builder since
# Docker 23), which reads docker/Dockerfile.dockerignore.
#
# Usage: scripts/build-images.sh [--registry R] [--tag T] [--push] [--dry-run]
#   --push     push both images after building them
#   --dry-run  print the docker commands instead of running them
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
registry="${PEREGRINE_REGISTRY:-ghcr.io/peregrine-dev}"
tag="${PEREGRINE_TAG:-}"
push=0
dry_run=0
while (($#)); do
  case "$1" in
    --registry) registry="${2:?--registry needs a value}"; shift 2 ;;
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    --push) push=1; shift ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-images: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "${tag}" ]; then
  tag="$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"[:space:]]*\)"\{0,1\}[[:space:]]*$/\1/p' \
           "${repo_root}/helm/peregrine/Chart.yaml")"
  if [ -z "${tag}" ]; then
    echo "build-images: no appVersion in helm/peregrine/Chart.yaml; pass --tag" >&2
    exit 1
  fi
fi

run() {
  if ((dry_run)); then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

if ((!dry_run)) && ! command -v docker >/dev/null 2>&1; then
  echo "build-images: docker is not on PATH" >&2
  exit 1
fi
for image in controller agent; do
  ref="${registry}/peregrine-${image}:${tag}"
  run docker build --file "${repo_root}/docker/Dockerfile" --target "${image}" --tag "${ref}" "${repo_root}"
  if ((push)); then run docker push "${ref}"; fi
done
