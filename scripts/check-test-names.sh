#!/usr/bin/env bash
# Fails when a Catch2 TEST_CASE name could not be registered with CTest as
# written: catch_discover_tests passes names through CMake lists, so a ';' cuts a name
# (the test CTest registers matches nothing and never runs), and a name must be one
# string literal on one line. Run by CTest (test_names) and usable on its own.
#
# Usage: scripts/check-test-names.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
status=0
while IFS= read -r hit; do
  echo "check-test-names: ';' in a test name (CTest would cut it there): ${hit}" >&2
  status=1
done < <(grep -rnE 'TEST_CASE\("[^"]*;' "${root}/tests" --include='*.cc' || true)
while IFS= read -r hit; do
  echo "check-test-names: a test name that does not close on its line: ${hit}" >&2
  status=1
done < <(grep -rnE 'TEST_CASE\("[^"]*$' "${root}/tests" --include='*.cc' || true)
if [ "${status}" -eq 0 ]; then echo "check-test-names: every test name registers as written"; fi
exit "${status}"
