"""The Python package peregrine on the real client library and real PyTorch.

Run by CTest with /usr/bin/python3 (Debian's python3-torch) and the environment
PYTHONPATH (the build tree's python/), PEREGRINE_CLIENT_LIB (the library) and
PEREGRINE_FINISH_SHARD (the tool that stands in for the agent's FinishShard).
"""

import collections
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import numpy
import torch

import peregrine
from peregrine import checkpoint

FINISH = os.environ.get("PEREGRINE_FINISH_SHARD", "")
Point = collections.namedtuple("Point", ["x", "y"])


def digest(t):
    t = t.detach().cpu().contiguous()
    return hashlib.sha256(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()


def tensors_of(obj, path="state"):
    """Every (path, tensor) in a nested state, in a stable order."""
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [p for k in obj for p in tensors_of(obj[k], "%s[%r]" % (path, k))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in tensors_of(v, "%s[%d]" % (path, i))]
    return []


def children():
    """The pids of this process's children (zombies included)."""
    pids = []
    for tid in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/children" % tid) as f:
            pids.extend(int(p) for p in f.read().split())
    return pids


class StoreTest(unittest.TestCase):
    """A rank's store directory named by the environment, as the agent sets it."""

    MODE = "snapshot"

    def setUp(self):
        self.assertTrue(os.path.exists(FINISH), "PEREGRINE_FINISH_SHARD=%r is not a file" % FINISH)
        self.dir = tempfile.mkdtemp(prefix="client-python-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.saved_env = dict(os.environ)
        self.addCleanup(self.restore_env)
        os.environ.update({"PEREGRINE_CHECKPOINT_DIR": self.dir, "RANK": "0", "WORLD_SIZE": "1",
                           "PEREGRINE_CHECKPOINT_MODE": self.MODE})
        for name in ("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES", "PEREGRINE_RESUME_STEP",
                     "PEREGRINE_CHECKPOINT_INTERVAL"):
            os.environ.pop(name, None)

    def restore_env(self):
        os.environ.clear()
        os.environ.update(self.saved_env)

    def shard(self, step):
        return os.path.join(self.dir, "step-%020d.shard" % step)

    def save_and_load(self, step, state):
        """Saves, finishes the shard as the agent would, and loads it as a resumed rank."""
        self.assertTrue(checkpoint.save(step, state))
        self.assertTrue(checkpoint.wait())  # a snapshot's child has published it
        subprocess.run([FINISH, self.shard(step)], check=True)
        os.environ["PEREGRINE_RESUME_STEP"] = str(step)
        loaded_step, loaded = checkpoint.load()
        self.assertEqual(loaded_step, step)
        return loaded

    def assert_same(self, original, loaded):
        """Same structure and container types; every tensor bit-identical, fresh storage."""
        self.assertIs(type(loaded), type(original))
        if isinstance(original, torch.Tensor):
            self.assertEqual(loaded.dtype, original.dtype)
            self.assertEqual(loaded.shape, original.shape)
            self.assertEqual(loaded.device, original.device)
            self.assertEqual(loaded.requires_grad, original.requires_grad)
            self.assertEqual(digest(loaded), digest(original))
            if original.numel():
                self.assertNotEqual(loaded.data_ptr(), original.data_ptr())
            self.assertTrue(loaded.is_contiguous())
        elif isinstance(original, numpy.ndarray):
            self.assertEqual(loaded.dtype, original.dtype)
            self.assertEqual(loaded.tobytes(), original.tobytes())
        elif isinstance(original, dict):
            self.assertEqual(list(loaded.keys()), list(original.keys()))
            for k in original:
                self.assert_same(original[k], loaded[k])
        elif isinstance(original, (list, tuple)):
            self.assertEqual(len(loaded), len(original))
            for a, b in zip(original, loaded):
                self.assert_same(a, b)
        else:
            self.assertEqual(loaded, original)


class CheckpointTest(StoreTest):

    def test_model_optimizer_and_rng_resume_bit_identically(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        self.assertIn("momentum_buffer", opt.state_dict()["state"][0])
        random.seed(3)
        numpy.random.seed(4)
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "torch_rng": torch.get_rng_state(),
                 "python_rng": random.getstate(), "numpy_rng": numpy.random.get_state(), "step": 2}
        loaded = self.save_and_load(2, state)
        self.assert_same(state, loaded)
        for path, t in tensors_of(state):
            self.assertEqual(digest(t), digest(eval(path, {"state": loaded})), path)

        # Resuming from the loaded state trains exactly like the original.
        resumed = torch.nn.Linear(16, 4)
        resumed_opt = torch.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9)
        resumed.load_state_dict(loaded["model"])
        resumed_opt.load_state_dict(loaded["opt"])
        torch.set_rng_state(loaded["torch_rng"])
        noise_resumed = torch.randn(3)
        torch.set_rng_state(state["torch_rng"])
        self.assertEqual(digest(noise_resumed), digest(torch.randn(3)))
        random.setstate(loaded["python_rng"])
        numpy.random.set_state(loaded["numpy_rng"])
        self.assertEqual((random.random(), numpy.random.rand()),
                         (random.seed(3) or random.random(), numpy.random.seed(4) or numpy.random.rand()))
        for m, o in ((model, opt), (resumed, resumed_opt)):
            o.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step()
        for a, b in zip(model.parameters(), resumed.parameters()):
            self.assertEqual(digest(a), digest(b))

    def test_every_dtype_round_trips(self):
        torch.manual_seed(1)
        base = torch.randn(5, 7) * 100
        state = {str(dtype): base.to(dtype) for dtype in
                 (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                  torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64)}
        state["nan_inf"] = torch.tensor([float("nan"), float("inf"), -0.0])
        self.assert_same(state, self.save_and_load(3, state))

    def test_non_contiguous_zero_dim_and_empty_tensors(self):
        grid = torch.arange(48, dtype=torch.float32).reshape(6, 8)
        state = {"transposed": grid.t(), "strided": grid[::2, 1::3], "expanded": torch.tensor([1.0]).expand(4, 3),
                 "zero_dim": torch.tensor(3.5), "empty": torch.empty(0, 3), "empty_int": torch.zeros(0, dtype=torch.int64),
                 "conj": torch.tensor([1 + 2j]).conj()}
        self.assertFalse(state["transposed"].is_contiguous())
        loaded = self.save_and_load(4, state)
        for k, t in state.items():
            self.assertTrue(torch.equal(loaded[k], t.resolve_conj()), k)
            self.assertEqual(loaded[k].shape, t.shape, k)
            self.assertTrue(loaded[k].is_contiguous(), k)
        self.assertEqual(loaded["zero_dim"].dim(), 0)

    def test_nested_containers_keep_their_types(self):
        shared = torch.ones(3)
        param = torch.nn.Parameter(torch.randn(2, 2))
        state = collections.OrderedDict(
            [("list", [1, 2.5, "three", None, True, b"bytes", (shared, [shared])]),
             ("tuple", (1, (2, (3, torch.zeros(2))))),
             ("point", Point(torch.arange(3), {"z": 1 + 2j})),
             ("sets", [{1, 2}, frozenset({"a"})]),
             ("meta", {"dtype": torch.float16, "device": torch.device("cpu"), "size": torch.Size([2, 3])}),
             ("param", param),
             ("numpy", {"a": numpy.arange(6, dtype=numpy.int16).reshape(2, 3)[:, ::2], "s": numpy.float32(2.5)}),
             (7, "int key")])
        loaded = self.save_and_load(5, state)
        self.assertIs(type(loaded), collections.OrderedDict)
        self.assertIs(type(loaded["point"]), Point)
        self.assertIsInstance(loaded["param"], torch.nn.Parameter)
        self.assertTrue(loaded["param"].requires_grad)
        self.assertEqual(digest(loaded["param"]), digest(param))
        self.assertEqual(loaded["sets"], [{1, 2}, frozenset({"a"})])
        self.assertEqual(loaded["meta"], state["meta"])
        self.assertEqual(loaded[7], "int key")
        self.assertTrue(numpy.array_equal(loaded["numpy"]["a"], state["numpy"]["a"]))
        self.assertEqual(loaded["numpy"]["s"], numpy.float32(2.5))
        # The tensor saved under two keys comes back as one tensor.
        self.assertIs(loaded["list"][6][0], loaded["list"][6][1][0])
        self.assert_same(state["list"], loaded["list"])
        self.assert_same(state["tuple"], loaded["tuple"])

    def test_more_tensors_than_segments(self):
        torch.manual_seed(2)
        state = {"small": [torch.randn(i % 7) for i in range(400)], "big": torch.randn(1000, 100)}
        self.assert_same(state, self.save_and_load(6, state))

    def test_saves_with_different_keys(self):
        first = {"a": torch.ones(4)}
        second = {"b": torch.zeros(2, dtype=torch.int8), "c": [torch.arange(3)]}
        self.assertTrue(checkpoint.save(10, first))
        self.assertTrue(checkpoint.save(20, second))
        subprocess.run([FINISH, self.shard(10), self.shard(20)], check=True)
        self.assert_same(first, checkpoint.load(10)[1])
        self.assert_same(second, checkpoint.load(20)[1])

    def test_unsupported_objects_name_their_key_path(self):
        cases = [({"opt": {"fn": lambda: 0}}, "state['opt']['fn']: cannot checkpoint a function"),
                 ({"a": [1, object()]}, "state['a'][1]: cannot checkpoint an object of type builtins.object"),
                 ({"m": torch.nn.Linear(2, 2)}, "state['m']: cannot checkpoint an object of type"),
                 ({"s": torch.zeros(3).to_sparse()}, "state['s']: cannot checkpoint a torch.sparse_coo tensor"),
                 ({(1, 2): 3}, "state: cannot checkpoint a dict key of type tuple"),
                 ({"o": numpy.array([object()])}, "state['o']: cannot checkpoint a numpy array of Python objects")]
        for state, message in cases:
            with self.assertRaises(TypeError) as caught:
                checkpoint.save(1, state)
            self.assertIn(message, str(caught.exception))
        self.assertEqual(os.listdir(self.dir), [])

    def test_save_over_the_allowance_is_skipped_with_a_marker(self):
        os.environ["PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES"] = str(64 << 10)
        self.assertTrue(checkpoint.save(1, {"w": torch.zeros(1000)}))
        self.assertFalse(checkpoint.save(2, {"w": torch.zeros(100000)}))
        self.assertEqual(sorted(os.listdir(self.dir)), ["step-%020d.shard" % 1, "step-%020d.skipped" % 2])
        with open(os.path.join(self.dir, "step-%020d.skipped" % 2)) as f:
            self.assertIn("above this rank's allowance of 65536 bytes", f.read())

    def test_unfinished_corrupt_and_missing_shards_are_refused(self):
        self.assertTrue(checkpoint.save(8, {"w": torch.ones(10)}))
        with self.assertRaisesRegex(RuntimeError, "checksum not set"):
            checkpoint.load(8)
        subprocess.run([FINISH, self.shard(8)], check=True)
        with open(self.shard(8), "r+b") as f:
            f.seek(4096 + 100)
            byte = f.read(1)
            f.seek(4096 + 100)
            f.write(bytes([byte[0] ^ 0xFF]))
        with self.assertRaisesRegex(RuntimeError, "checksum mismatch"):
            checkpoint.load(8)
        os.environ["PEREGRINE_RESUME_STEP"] = "9"
        with self.assertRaisesRegex(FileNotFoundError, "no shard of step 9"):
            checkpoint.load()

    def test_fresh_start_interval_and_progress(self):
        self.assertEqual(checkpoint.load(), (0, None))
        self.assertEqual(checkpoint.interval(), 0)
        os.environ["PEREGRINE_CHECKPOINT_INTERVAL"] = "50"
        self.assertEqual(checkpoint.interval(), 50)
        os.environ["PEREGRINE_CHECKPOINT_INTERVAL"] = "often"
        with self.assertRaisesRegex(ValueError, "PEREGRINE_CHECKPOINT_INTERVAL='often'"):
            checkpoint.interval()
        with self.assertRaises(ValueError):
            peregrine.step(1, bad_name=1, **{"a b": 2})

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
    def test_cuda_tensors_come_back_on_their_device(self):
        state = {"w": torch.randn(64, 64, device="cuda"), "cpu": torch.ones(2)}
        loaded = self.save_and_load(9, state)
        self.assertEqual(loaded["w"].device, state["w"].device)
        self.assert_same(state, loaded)


class CopyModeCheckpointTest(CheckpointTest):
    """Every case above again with PEREGRINE_CHECKPOINT_MODE=copy."""

    MODE = "copy"


class SnapshotTest(StoreTest):
    """What the snapshot mode adds: the fork's image, one child at a time, failures."""

    def test_training_right_after_save_does_not_change_what_was_saved(self):
        torch.manual_seed(1)
        model = torch.nn.Linear(512, 512)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(64, 512)
        model(x).square().mean().backward()
        opt.step()
        state = {"model": model.state_dict(), "opt": opt.state_dict()}
        expected = {path: digest(t) for path, t in tensors_of(state)}
        self.assertTrue(checkpoint.save(1, state))
        for _ in range(3):  # training goes on at once, in place
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        self.assertNotEqual(digest(model.weight), expected["state['model']['weight']"])
        self.assertTrue(checkpoint.wait())
        subprocess.run([FINISH, self.shard(1)], check=True)
        _, loaded = checkpoint.load(1)
        self.assertEqual({path: digest(t) for path, t in tensors_of(loaded)}, expected)

    def test_back_to_back_saves_keep_one_child_and_all_publish(self):
        w = torch.zeros(1 << 20)
        for step in range(1, 6):
            w.fill_(step)
            self.assertTrue(checkpoint.save(step, {"w": w}))
            self.assertLessEqual(len(children()), 1)
        self.assertTrue(checkpoint.wait())
        self.assertEqual(children(), [])
        for step in range(1, 6):
            subprocess.run([FINISH, self.shard(step)], check=True)
            self.assertTrue(torch.equal(checkpoint.load(step)[1]["w"], torch.full((1 << 20,), float(step))))

    def test_a_failed_child_is_reported_by_wait_with_a_marker_and_no_zombie(self):
        os.mkdir(os.path.join(self.dir, "step-%020d.tmp" % 3))  # the child cannot create its file
        saved_stderr = os.dup(2)
        with tempfile.TemporaryFile() as captured:
            os.dup2(captured.fileno(), 2)
            try:
                self.assertTrue(checkpoint.save(3, {"w": torch.ones(100)}))
                self.assertFalse(checkpoint.wait())
            finally:
                os.dup2(saved_stderr, 2)
                os.close(saved_stderr)
            captured.seek(0)
            said = captured.read().decode()
        self.assertIn("checkpoint of step 3 not saved: cannot create", said)
        with open(os.path.join(self.dir, "step-%020d.skipped" % 3)) as f:
            self.assertIn("cannot create", f.read())
        self.assertFalse(os.path.exists(self.shard(3)))
        self.assertEqual(children(), [])

    def test_load_right_after_save_waits_for_the_child(self):
        self.assertTrue(checkpoint.save(4, {"w": torch.arange(1 << 22)}))
        with self.assertRaisesRegex(RuntimeError, "checksum not set"):  # there, not yet finished
            checkpoint.load(4)
        self.assertEqual(children(), [])
        self.assertTrue(checkpoint.wait())

    def test_shared_memory_tensors_are_copied_not_forked(self):
        w = torch.zeros(1000).share_memory_()
        self.assertTrue(checkpoint.save(5, {"w": w}))
        self.assertEqual(children(), [])  # copy mode: no child
        self.assertTrue(os.path.exists(self.shard(5)))
        with self.assertRaisesRegex(ValueError, "mode must be"):
            checkpoint.save(6, {"w": w}, mode="later")

    def test_a_script_that_ends_right_after_save_leaves_its_shard_complete(self):
        r = run_script("""
            import torch
            from peregrine import checkpoint
            print(checkpoint.save(2, {"w": torch.ones(1 << 24)}))
        """, dict(os.environ))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "True\n")
        subprocess.run([FINISH, self.shard(2)], check=True)
        self.assertTrue(torch.equal(checkpoint.load(2)[1]["w"], torch.ones(1 << 24)))


def run_script(script, env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=120)


class FallbackTest(unittest.TestCase):
    """A script runs unchanged without an agent or without the library."""

    def test_without_the_library_every_call_is_a_no_op_that_says_so_once(self):
        package = tempfile.mkdtemp(prefix="client-python-nolib-")
        self.addCleanup(shutil.rmtree, package, True)
        # A copy of the package with no lib/ two levels up and no PEREGRINE_CLIENT_LIB.
        shutil.copytree(os.path.dirname(peregrine.__file__), os.path.join(package, "a", "b", "peregrine"))
        env = {k: v for k, v in os.environ.items() if k != "PEREGRINE_CLIENT_LIB"}
        env.update({"PYTHONPATH": os.path.join(package, "a", "b"), "PEREGRINE_CHECKPOINT_DIR": package,
                    "PEREGRINE_RESUME_STEP": "5"})
        r = run_script("""
            import sys
            import peregrine
            from peregrine import checkpoint
            peregrine.step(1, loss=0.5, grad_norm=float("nan"))
            print(checkpoint.save(1, {"a": [1, 2]}), checkpoint.save(2, {"a": 3}), checkpoint.load())
            print("torch" in sys.modules)
        """, env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[peregrine] step=1 loss=0.5 grad_norm=nan\nFalse False (0, None)\nFalse\n")
        self.assertEqual(r.stderr, "peregrine: no agent store; checkpoints are not kept\n")

    def test_with_the_library_and_no_agent(self):
        env = {k: v for k, v in os.environ.items() if k != "PEREGRINE_CHECKPOINT_DIR"}
        r = run_script("""
            import sys
            import peregrine
            from peregrine import checkpoint
            peregrine.step(7, loss=1.25)
            print(checkpoint.save(1, {"a": 1}), checkpoint.save(2, {"a": 2}), checkpoint.load(3))
            print("torch" in sys.modules)
        """, env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[peregrine] step=7 loss=1.25\nFalse False (0, None)\nFalse\n")
        self.assertEqual(r.stderr, "peregrine: no agent store; checkpoints are not kept\n")


if __name__ == "__main__":
    unittest.main()
