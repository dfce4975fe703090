#!/usr/bin/env bash
# Regenerates the Python traceback samples the recovery-policy tests read (real python3
# output, stderr and stdout as the agent's log tail sees them). Usage: ./generate.sh
# (needs python3; the samples name the Python version that wrote them in VERSION).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
cd "${work}"
run() {  # run NAME ARGS...: python3 ARGS, output (both streams) into NAME.txt; must fail
  local name="$1"; shift
  if python3 "$@" > "${here}/${name}.txt" 2>&1; then echo "${name}: expected a failure" >&2; exit 1; fi
}
# The paths in the samples are the temporary directory's; the tests do not depend on them.

# A SyntaxError in the main script: no "Traceback (most recent call last):" header.
printf 'import os\n\ndef train(:\n    pass\n' > bad_syntax.py
run syntax_error_main bad_syntax.py

# An IndentationError (a SyntaxError subclass) in an imported module: with the header.
printf 'def f():\nreturn 1\n' > badmod.py
printf 'print("step 1 loss 2.0")\nimport badmod\n' > imports_bad.py
run indentation_error_import imports_bad.py

# A TypeError 80 frames deep (distinct functions, so Python does not fold them): the
# header is far above the last 50 lines.
{
  echo 'def f79(batch):'
  echo '    return batch + 1'
  for i in $(seq 78 -1 0); do printf 'def f%d(batch):\n    return f%d(batch)\n' "$i" "$((i + 1))"; done
  echo 'print("step 7 loss 1.5")'
  echo 'f0("not a tensor")'
} > deep.py
run deep_type_error deep.py

# Chained: a KeyError while handling which a ValueError is raised (the last one decides).
cat > chained.py <<'PY'
config = {"lr": 0.1}
try:
    bs = config["batch_size"]
except KeyError as e:
    raise ValueError("config is missing batch_size") from e
PY
run chained_value_error chained.py

# Chained the other way: a KeyError then a RuntimeError (not a user-code error).
cat > chained_runtime.py <<'PY'
def load():
    return {}["weights"]
try:
    load()
except KeyError:
    raise RuntimeError("NCCL communicator was aborted on rank 3")
PY
run chained_runtime_error chained_runtime.py

# A missing module.
printf 'import flash_attn_not_installed\n' > missing.py
run module_not_found missing.py

# torchrun's wrapping: the launcher runs the rank (whose AttributeError traceback is
# printed first) and then raises ChildFailedError with the message torch formats. The
# launcher here is a small stand-in with torch's module path and message layout
# (torch.distributed.elastic.multiprocessing.errors), since torch is not installed.
mkdir -p torch/distributed/elastic/multiprocessing/errors
touch torch/__init__.py torch/distributed/__init__.py torch/distributed/elastic/__init__.py \
  torch/distributed/elastic/multiprocessing/__init__.py
cat > torch/distributed/elastic/multiprocessing/errors/__init__.py <<'PY'
class ChildFailedError(Exception):
    def __init__(self, name, failures):
        self.name = name
        self.failures = failures
        super().__init__(self.format_msg())

    def format_msg(self, boarder_delim="=", section_delim="-"):
        title = f"{self.name} FAILED"
        root_rank, root = next(iter(self.failures.items()))
        width = 60
        lines = [boarder_delim * width, title, section_delim * width, "Failures:", "  <NO_OTHER_FAILURES>",
                 section_delim * width, "Root Cause (first observed failure):", f"[0]:",
                 f"  time      : 2024-05-02_10:11:12", f"  host      : node-17",
                 f"  rank      : {root_rank} (local_rank: {root_rank})",
                 f"  exitcode  : {root} (pid: 4242)", "  error_file: <N/A>",
                 "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
                 boarder_delim * width]
        return "\n" + "\n".join(lines)
PY
cat > train.py <<'PY'
class Model:
    pass
print("step 12 loss 0.93", flush=True)
Model().forward_with_cache(3)
PY
cat > torchrun.py <<'PY'
import subprocess, sys
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

def launch_agent(cmd):
    code = subprocess.call([sys.executable] + cmd)
    if code != 0:
        raise ChildFailedError(name=cmd[0], failures={0: code})

def main():
    launch_agent(sys.argv[1:])

if __name__ == "__main__":
    sys.exit(main())
PY
run torchrun_child_failed torchrun.py train.py

python3 --version > "${here}/VERSION"
