#!/usr/bin/env bash
# The whole test suite (README, second command): sets up and builds, installs helm and
# kubectl for the chart tests, then runs every test with CTest in parallel.
#
# Usage: scripts/test.sh [extra ctest arguments, e.g. -R e2e]
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"${repo_root}/scripts/setup.sh"
"${repo_root}/scripts/install-tools.sh"
cd "${repo_root}"
exec ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
