"""Micro-batch plans: this data-parallel replica's share of a step's micro-batches.

When the Peregrine controller mitigates a slow data-parallel replica it may give that
replica fewer of the step's micro-batches and the others more (the agent writes the plan
to the file named by PEREGRINE_MICROBATCH_PLAN; the client library reads it). A training
loop with gradient accumulation asks every step:

    share = peregrine.microbatches(step, dp_rank, default=k)
    opt.zero_grad()
    for g in range(share.first, share.first + share.count):   # global micro-batch indices
        loss = model(batch_of(step, g)) ...
        (loss * share.gradient_scale).backward()                # sum of scaled gradients
    # DDP / all_reduce averages over the replicas, then opt.step()
    peregrine.step(step, loss=..., mb=share.count)               # "mb=" tells the agent

The step's global micro-batches are 0 .. n*k-1 for n replicas of k each in the even split;
replica r normally runs r*k .. r*k+k-1. Under a plan it runs share.first .. share.first +
share.count - 1 and gradient_scale is n/M (M = n*k), so the replicas' average of their
scaled sums is the same update as the even split's (up to floating-point reordering).
Without a plan (planned is False) the share is the even split and gradient_scale 1/k: the
mean over this replica's micro-batches.

Printing mb=<count> on the progress line is how the agent learns that this trainer
follows plans; without it the controller treats redistribution as unavailable.
"""

import ctypes
import collections

from . import _lib

__all__ = ["MicroBatches", "MicroBatchPlanError", "microbatches"]

MicroBatches = collections.namedtuple("MicroBatches", ["count", "gradient_scale", "planned", "first"])
MicroBatches.__doc__ = """This replica's share of a step.

count: micro-batches to run; gradient_scale: the factor for the SUM of their gradients;
planned: whether a plan applies (False: the even split); first: the global index of the
first micro-batch to run."""


class MicroBatchPlanError(RuntimeError):
    """The plan file cannot be used (its message names the file and the field). Other
    replicas may follow the plan, so training on with the even split would train on the
    wrong micro-batches: let the step fail."""


def _even(dp_rank, default):
    return MicroBatches(default, 1.0 / default, False, dp_rank * default)


def microbatches(step, dp_rank, default):
    """This replica's share of `step`: MicroBatches(count, gradient_scale, planned, first).

    step >= 0, dp_rank >= 0 (PEREGRINE_DP_RANK under the agent) and default >= 1 (k, the
    even split's micro-batches per replica) are ints. Outside an agent, or without the
    client library, the even split. Raises ValueError on bad arguments and
    MicroBatchPlanError when the plan file is unusable.
    """
    step, dp_rank, default = int(step), int(dp_rank), int(default)
    if step < 0 or dp_rank < 0 or default < 1 or default >= 1 << 32 or dp_rank >= 1 << 32:
        raise ValueError("peregrine.microbatches: need step >= 0, dp_rank >= 0 and default >= 1 "
                         "(got %d, %d, %d)" % (step, dp_rank, default))
    lib = _lib.lib()
    if lib is None or not hasattr(lib, "pg_microbatches"):
        return _even(dp_rank, default)
    fn = lib.pg_microbatches
    if fn.argtypes is None:
        c = ctypes
        fn.restype = c.c_int
        fn.argtypes = [c.c_uint64, c.c_uint32, c.c_uint32, c.POINTER(c.c_uint32), c.POINTER(c.c_uint32),
                       c.POINTER(c.c_double), c.c_char_p, c.c_size_t]
    first = ctypes.c_uint32(0)
    count = ctypes.c_uint32(0)
    scale = ctypes.c_double(0.0)
    err = ctypes.create_string_buffer(512)
    rc = fn(step, dp_rank, default, ctypes.byref(first), ctypes.byref(count), ctypes.byref(scale), err, len(err))
    if rc == _lib.PG_OK:
        return MicroBatches(count.value, scale.value, True, first.value)
    if rc in (_lib.PG_NOT_FOUND, _lib.PG_NO_AGENT):
        return _even(dp_rank, default)
    raise MicroBatchPlanError(err.value.decode("utf-8", "replace") or "peregrine.microbatches: error %d" % rc)
