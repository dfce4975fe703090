"""peregrine: progress reporting and in-memory checkpoints for a training process run by
the Peregrine agent.

    import peregrine
    peregrine.step(step, loss=loss.item(), grad_norm=g)   # the "[peregrine] step=" line

    from peregrine import checkpoint
    start, state = checkpoint.load()                      # (0, None) on a fresh start
    if checkpoint.interval() and step % checkpoint.interval() == 0:
        checkpoint.save(step, {"model": model.state_dict(), "opt": opt.state_dict()})
    checkpoint.wait()                                     # optional: did every save land?

    share = peregrine.microbatches(step, dp_rank, default=k)   # micro-batch plans (see
    # peregrine.microbatches): run share.count of the step's micro-batches from share.first,
    # scale their summed gradients by share.gradient_scale, print mb=share.count

Outside an agent (or without the client library) step() still prints its line and the
checkpoint calls do nothing. torch is imported only when a checkpoint holds tensors.
"""

import ctypes
import math
import sys

from . import _lib
from . import checkpoint  # noqa: F401  (peregrine.checkpoint)
from .microbatches import MicroBatchPlanError, MicroBatches, microbatches  # noqa: F401

__all__ = ["step", "checkpoint", "microbatches", "MicroBatches", "MicroBatchPlanError"]


def _number(v):
    v = float(v)
    return "nan" if math.isnan(v) else "%.9g" % v


def step(step, loss=None, **metrics):
    """Prints the progress line "[peregrine] step=<step>[ loss=<loss>] k=v ..." on stdout.

    step is a non-negative int; loss and the metrics are numbers. Raises ValueError on a
    negative step or a metric name with spaces or '='.
    """
    step = int(step)
    if step < 0:
        raise ValueError("peregrine.step: step must be >= 0, not %d" % step)
    for name in metrics:
        if not name or any(c in name for c in " \t\r\n="):
            raise ValueError("peregrine.step: bad metric name %r" % name)
    lib = _lib.lib()
    # Python's own buffer first, so the line never lands inside a half-written one.
    sys.stdout.flush()
    if lib is None:
        parts = ["[peregrine] step=%d" % step]
        if loss is not None:
            parts.append("loss=" + _number(loss))
        parts.extend("%s=%s" % (k, _number(v)) for k, v in metrics.items())
        print(" ".join(parts), flush=True)
        return
    names = (ctypes.c_char_p * len(metrics))(*[k.encode() for k in metrics])
    values = (ctypes.c_double * len(metrics))(*[float(v) for v in metrics.values()])
    has_loss = 0 if loss is None else 1
    rc = lib.pg_step(step, has_loss, float(loss) if has_loss else 0.0, names, values, len(metrics))
    if rc != _lib.PG_OK:
        raise OSError("peregrine.step: cannot write the progress line")
