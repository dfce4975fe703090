"""peregrine.microbatches on the real client library, and the PyTorch example's gradient
accumulation under a micro-batch plan on real PyTorch (2 processes, gloo on loopback).

Run by CTest with /usr/bin/python3 (Debian's python3-torch) and the environment
PYTHONPATH (the build tree's python/) and PEREGRINE_CLIENT_LIB (the library).
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

import numpy

import peregrine

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "pytorch", "train.py"))


def plan_text(counts, global_mb, scale, from_step=0, plan_id=1):
    return ("version=1\nplan_id=%d\nfrom_step=%d\nglobal_micro_batches=%d\ngradient_scale=%.17g\ncounts=%s\n"
            % (plan_id, from_step, global_mb, scale, ",".join(str(c) for c in counts)))


def publish(path, text):
    """Replaces the plan file as the agent does: a temporary file renamed over it."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


class MicroBatchesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="peregrine-mb-")
        self.path = os.path.join(self.dir, "microbatch-plan")
        self.saved = os.environ.pop("PEREGRINE_MICROBATCH_PLAN", None)

    def tearDown(self):
        os.environ.pop("PEREGRINE_MICROBATCH_PLAN", None)
        if self.saved is not None:
            os.environ["PEREGRINE_MICROBATCH_PLAN"] = self.saved
        shutil.rmtree(self.dir)

    def test_even_split_without_agent_or_plan(self):
        self.assertIsNotNone(peregrine._lib.lib(), "the client library did not load")
        self.assertEqual(peregrine.microbatches(3, 1, 4), (4, 0.25, False, 4))
        os.environ["PEREGRINE_MICROBATCH_PLAN"] = self.path
        self.assertEqual(peregrine.microbatches(3, 1, 4), (4, 0.25, False, 4))
        with self.assertRaises(ValueError):
            peregrine.microbatches(3, 1, 0)
        with self.assertRaises(ValueError):
            peregrine.microbatches(-1, 0, 2)

    def test_plan_applies_from_its_step_and_is_reread(self):
        os.environ["PEREGRINE_MICROBATCH_PLAN"] = self.path
        publish(self.path, plan_text([1, 3], 4, 0.5, from_step=10))
        self.assertEqual(peregrine.microbatches(9, 1, 2), (2, 0.5, False, 2))
        share = peregrine.microbatches(10, 1, 2)
        self.assertEqual(share, (3, 0.5, True, 1))
        self.assertEqual((share.count, share.gradient_scale, share.planned, share.first), (3, 0.5, True, 1))
        self.assertEqual(peregrine.microbatches(10, 0, 2), (1, 0.5, True, 0))
        publish(self.path, plan_text([3, 1], 4, 0.5, from_step=10, plan_id=2))
        self.assertEqual(peregrine.microbatches(11, 1, 2), (1, 0.5, True, 3))
        os.remove(self.path)
        self.assertEqual(peregrine.microbatches(12, 1, 2), (2, 0.5, False, 2))

    def test_unusable_plan_names_file_and_field(self):
        os.environ["PEREGRINE_MICROBATCH_PLAN"] = self.path
        cases = [
            (plan_text([1, 0], 1, 0.5), 0, 2, "counts[1]"),
            (plan_text([1, 3], 4, float("nan")), 0, 2, "gradient_scale"),
            (plan_text([1, 3], 4, 0.5), 5, 2, "dp_rank 5"),
            (plan_text([1, 3], 4, 0.5), 0, 4, "global_micro_batches"),
            ("\x00\x01garbage", 0, 2, "line 1"),
        ]
        for text, dp_rank, default, field in cases:
            publish(self.path, text)
            with self.assertRaises(peregrine.MicroBatchPlanError) as caught:
                peregrine.microbatches(1, dp_rank, default)
            message = str(caught.exception)
            self.assertIn(self.path, message)
            self.assertIn(field, message)

    def test_without_the_library_the_even_split(self):
        os.environ["PEREGRINE_MICROBATCH_PLAN"] = self.path
        publish(self.path, plan_text([1, 3], 4, 0.5))
        # The package alone, away from the build tree's lib/ (which it would find beside it).
        shutil.copytree(os.path.dirname(peregrine.__file__), os.path.join(self.dir, "pkg", "peregrine"))
        env = dict(os.environ, PEREGRINE_CLIENT_LIB=os.path.join(self.dir, "missing.so"),
                   PYTHONPATH=os.path.join(self.dir, "pkg"))
        code = "import peregrine; print(tuple(peregrine.microbatches(1, 1, 2)))"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        # Without the library nothing reads plans: the even split.
        self.assertEqual(out.stdout.strip(), "(2, 0.5, False, 2)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExampleAccumulationTest(unittest.TestCase):
    """examples/pytorch/train.py --micro-batches 2 on 2 ranks: the plan {1, 3} gives the
    same parameters and losses as the even split {2, 2}."""

    STEPS = 4

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="peregrine-mb-torch-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def run_world(self, tag, plan):
        plan_path = os.path.join(self.dir, tag + "-plan")
        if plan is not None:
            publish(plan_path, plan)
        port = free_port()
        procs = []
        for rank in range(2):
            env = {k: v for k, v in os.environ.items() if not k.startswith("PEREGRINE_CHECKPOINT")}
            env.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       PEREGRINE_MICROBATCH_PLAN=plan_path, OMP_NUM_THREADS="1")
            out = open(os.path.join(self.dir, "%s-%d.out" % (tag, rank)), "w")
            procs.append((subprocess.Popen(
                [sys.executable, EXAMPLE, "--steps", str(self.STEPS), "--micro-batches", "2", "--batch", "8",
                 "--hidden", "16", "--layers", "2", "--params-out", os.path.join(self.dir, tag + "-{rank}.bin")],
                env=env, stdout=out, stderr=subprocess.STDOUT), out))
        for proc, out in procs:
            try:
                proc.wait(timeout=240)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                out.close()
        lines = []
        for rank, (proc, _) in enumerate(procs):
            with open(os.path.join(self.dir, "%s-%d.out" % (tag, rank))) as f:
                text = f.read()
            self.assertEqual(proc.returncode, 0, text)
            steps = re.findall(r"^\[peregrine\] step=(\d+) loss=(\S+) .*mb=(\d+)$", text, re.M)
            self.assertEqual([int(s) for s, _, _ in steps], list(range(1, self.STEPS + 1)), text)
            lines.append([(float(loss), int(mb)) for _, loss, mb in steps])
        params = [numpy.fromfile(os.path.join(self.dir, "%s-%d.bin" % (tag, r)), dtype=numpy.float32)
                  for r in range(2)]
        return lines, params

    def test_plan_gives_the_even_split_update(self):
        even_lines, even_params = self.run_world("even", None)
        plan_lines, plan_params = self.run_world("plan", plan_text([1, 3], 4, 0.5, from_step=2))
        # Who ran what: even 2 + 2; the plan from step 2 on: 1 + 3.
        self.assertEqual([mb for _, mb in even_lines[0]], [2, 2, 2, 2])
        self.assertEqual([mb for _, mb in plan_lines[0]], [2, 1, 1, 1])
        self.assertEqual([mb for _, mb in plan_lines[1]], [2, 3, 3, 3])
        # Both ranks hold the same parameters, and those of the even split.
        numpy.testing.assert_array_equal(even_params[0], even_params[1])
        numpy.testing.assert_array_equal(plan_params[0], plan_params[1])
        numpy.testing.assert_allclose(plan_params[0], even_params[0], rtol=1e-5, atol=1e-6)
        # The step's loss (the ranks' weighted sums averaged) is the same curve.
        for s in range(self.STEPS):
            even = (even_lines[0][s][0] + even_lines[1][s][0]) / 2
            plan = (plan_lines[0][s][0] + plan_lines[1][s][0]) / 2
            self.assertAlmostEqual(plan, even, delta=1e-5 * max(1.0, abs(even)))
        # The comparison can tell: the same plan with a wrong gradient_scale (1/M instead of n/M)
        # ends elsewhere.
        _, wrong_params = self.run_world("wrong", plan_text([1, 3], 4, 0.25, from_step=2))
        self.assertFalse(numpy.allclose(wrong_params[0], even_params[0], rtol=1e-5, atol=1e-6))


if __name__ == "__main__":
    unittest.main()
