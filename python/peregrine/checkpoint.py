"""In-memory checkpoints in the Peregrine agent's store.

    from peregrine import checkpoint
    start, state = checkpoint.load()            # (0, None) on a fresh start
    ...
    if checkpoint.interval() and step % checkpoint.interval() == 0:
        checkpoint.save(step, {"model": model.state_dict(), "opt": opt.state_dict(),
                               "rng": torch.get_rng_state(), "data_pos": pos})

What a state may hold: None, bool, int, float, complex, str, bytes; dict / OrderedDict
(keys of those scalar types), list, tuple, namedtuple, set, frozenset; torch.Tensor and
torch.nn.Parameter (dense, any dtype), torch.dtype, torch.device, torch.Size; numpy
arrays (not of dtype object) and numpy scalars. Anything else raises TypeError naming its
key path, e.g. "state['opt']['fn']: cannot checkpoint a function".

How it is stored: segment 0 of the shard is a pickle of the state's skeleton (each tensor
replaced by a placeholder with its dtype, shape, device and where its bytes are), then the
tensors' bytes, one segment per tensor (past 249 tensors the smallest share one segment).
Tensors are saved contiguous: a non-contiguous tensor comes back contiguous with the
same values. CUDA tensors are copied to the host for the save (that copy is part of the
save's blocking time) and moved back to their device on load. The same tensor object
saved under two keys comes back as one tensor under both. Load returns fresh tensors with
their own storage, bit-identical to what was saved, in the same container types.

How a save works: in snapshot mode (the default; PEREGRINE_CHECKPOINT_MODE=copy|snapshot
or save(..., mode=...) choose) the library fork()s the process once the skeleton is
pickled and the tensors' addresses are collected; the child writes the shard from its
copy-on-write view of memory and save() returns right after the fork, so the training
loop may update its tensors at once. Tensors in memory shared with other processes
(Tensor.is_shared(), numpy memmaps) are not snapshotted by fork: a state holding one is
saved in copy mode. At most one snapshot is in flight: the next save(), load() or wait()
waits for the previous one, and so does the interpreter's exit. A snapshot that failed is
said on stderr by the next save() or wait(). In copy mode save() returns once the shard
is written.

torch and numpy are never imported here: a tensor can only exist once its module is.
"""

import atexit
import collections
import ctypes
import os
import pickle
import sys

from . import _lib

_FORMAT = "peregrine-python-1"
_MAX_SEGMENTS = 250  # checkpoint/shard_format.h kMaxSegments; segment 0 is the skeleton
_ERR_LEN = 1024
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_MODES = {None: _lib.PG_MODE_DEFAULT, "copy": _lib.PG_MODE_COPY, "snapshot": _lib.PG_MODE_SNAPSHOT}


class _TensorRef:
    """Placeholder for a tensor or array in the pickled skeleton."""

    __slots__ = ("kind", "segment", "offset", "nbytes", "dtype", "shape", "device", "requires_grad",
                 "parameter", "ident")

    def __init__(self, **kw):
        for name in self.__slots__:
            setattr(self, name, kw.get(name))

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state):
        for name in self.__slots__:
            setattr(self, name, state.get(name))


def interval():
    """Steps between saves the agent asks for (PEREGRINE_CHECKPOINT_INTERVAL); 0: off."""
    value = os.environ.get("PEREGRINE_CHECKPOINT_INTERVAL", "").strip()
    if not value:
        return 0
    try:
        n = int(value)
    except ValueError:
        raise ValueError("PEREGRINE_CHECKPOINT_INTERVAL=%r is not an integer" % value) from None
    if n < 0:
        raise ValueError("PEREGRINE_CHECKPOINT_INTERVAL=%d is negative" % n)
    return n


def _key_path(path, key):
    return "%s[%r]" % (path, key)


def _describe(obj):
    import types
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.LambdaType)):
        return "a function"
    if isinstance(obj, types.ModuleType):
        return "a module"
    if isinstance(obj, type):
        return "a class (%s)" % obj.__qualname__
    t = type(obj)
    return "an object of type %s.%s" % (t.__module__, t.__qualname__)


class _Flattener:
    """Walks a state, collecting tensors and arrays and building the skeleton."""

    def __init__(self):
        self.torch = sys.modules.get("torch")
        self.numpy = sys.modules.get("numpy")
        self.buffers = []  # (ref, object whose bytes to save: contiguous CPU tensor / array)
        self.seen = {}  # id(tensor) -> its ref (the same object saved once)
        self.keep = []  # originals whose ids are in `seen`, alive until the save ends
        self.shared = None  # key path of a tensor in shared memory (fork cannot snapshot it)

    def walk(self, obj, path):
        t = type(obj)
        if t in _SCALARS:
            return obj
        if t is dict or t is collections.OrderedDict:
            out = t()
            for k, v in obj.items():
                if type(k) not in _SCALARS:
                    raise TypeError("%s: cannot checkpoint a dict key of type %s (keys must be None, bool, int, "
                                    "float, str or bytes)" % (path, type(k).__name__))
                out[k] = self.walk(v, _key_path(path, k))
            return out
        if t is list:
            return [self.walk(v, "%s[%d]" % (path, i)) for i, v in enumerate(obj)]
        if t is tuple:
            return tuple(self.walk(v, "%s[%d]" % (path, i)) for i, v in enumerate(obj))
        if isinstance(obj, tuple) and hasattr(t, "_fields") and t.__module__ != "torch":
            return t(*[self.walk(v, "%s.%s" % (path, f)) for f, v in zip(t._fields, obj)])
        if t is set or t is frozenset:
            return t(self.walk(v, "%s{%r}" % (path, v)) for v in obj)
        torch, numpy = self.torch, self.numpy
        if torch is not None:
            if isinstance(obj, torch.Tensor):
                return self._tensor(obj, path)
            if t is torch.Size or t is torch.dtype or t is torch.device:
                return obj
        if numpy is not None:
            if isinstance(obj, numpy.ndarray):
                return self._array(obj, path)
            if isinstance(obj, numpy.generic) and obj.dtype.kind != "O":
                return obj
        raise TypeError("%s: cannot checkpoint %s" % (path, _describe(obj)))

    def _tensor(self, obj, path):
        torch = self.torch
        if type(obj) not in (torch.Tensor, torch.nn.Parameter):
            raise TypeError("%s: cannot checkpoint a tensor subclass (%s)" % (path, type(obj).__qualname__))
        if obj.layout != torch.strided:
            raise TypeError("%s: cannot checkpoint a %s tensor (only dense tensors)" % (path, obj.layout))
        if obj.is_quantized:
            raise TypeError("%s: cannot checkpoint a quantized tensor" % path)
        if obj.device.type == "meta":
            raise TypeError("%s: cannot checkpoint a meta tensor (it has no data)" % path)
        if id(obj) in self.seen:
            return self.seen[id(obj)]
        if obj.device.type != "cpu":
            data = obj.detach().to("cpu")  # the host copy of a device tensor
        else:
            data = obj
            if self.shared is None and obj.is_shared():
                self.shared = path
        if not data.is_contiguous() or data.is_conj() or data.is_neg():
            data = data.detach().resolve_conj().resolve_neg().contiguous()
        # else: the tensor's own bytes are read in place (the common case: no new tensor)
        ref = _TensorRef(kind="torch", dtype=str(obj.dtype).replace("torch.", ""), shape=tuple(obj.shape),
                         device=str(obj.device), requires_grad=bool(obj.requires_grad),
                         parameter=isinstance(obj, torch.nn.Parameter), nbytes=data.numel() * data.element_size(),
                         ident=len(self.seen))
        self.seen[id(obj)] = ref
        self.keep.append(obj)
        self.buffers.append((ref, data))
        return ref

    def _array(self, obj, path):
        numpy = self.numpy
        if obj.dtype.hasobject:
            raise TypeError("%s: cannot checkpoint a numpy array of Python objects" % path)
        if id(obj) in self.seen:
            return self.seen[id(obj)]
        data = numpy.ascontiguousarray(obj)
        if self.shared is None and isinstance(obj, numpy.memmap) and numpy.shares_memory(data, obj):
            self.shared = path
        ref = _TensorRef(kind="numpy", dtype=data.dtype.str if data.dtype.names is None else data.dtype.descr,
                         shape=tuple(obj.shape), nbytes=int(data.nbytes), ident=len(self.seen))
        self.seen[id(obj)] = ref
        self.keep.append(obj)
        self.buffers.append((ref, data))
        return ref


def _address(buffer):
    if hasattr(buffer, "data_ptr"):
        return buffer.data_ptr()
    return buffer.ctypes.data


def _segments(flat):
    """Assigns each buffer a segment; returns [(address, length)] of segments 1.. and
    the packed buffers that must stay alive."""
    buffers = flat.buffers
    own = len(buffers)
    if own > _MAX_SEGMENTS - 1:
        own = _MAX_SEGMENTS - 2  # the rest share the last segment
    order = sorted(range(len(buffers)), key=lambda i: -buffers[i][0].nbytes)
    segments, alive = [], []
    for rank, i in enumerate(order[:own]):
        ref, data = buffers[i]
        ref.segment, ref.offset = rank + 1, 0
        segments.append((_address(data) if ref.nbytes else 0, ref.nbytes))
    rest = order[own:]
    if rest:
        total = sum(buffers[i][0].nbytes for i in rest)
        packed = ctypes.create_string_buffer(max(total, 1))
        offset = 0
        for i in rest:
            ref, data = buffers[i]
            ref.segment, ref.offset = own + 1, offset
            if ref.nbytes:
                ctypes.memmove(ctypes.addressof(packed) + offset, _address(data), ref.nbytes)
            offset += ref.nbytes
        alive.append(packed)
        segments.append((ctypes.addressof(packed), total))
    return segments, alive


def _report(lib, block):
    """Collects the outcomes of finished snapshot saves (waiting for the one in flight
    when `block`); says each failure on stderr. True when every one was published."""
    ok = True
    step = ctypes.c_uint64(0)
    err = ctypes.create_string_buffer(_ERR_LEN)
    while True:
        rc = lib.pg_wait(1 if block else 0, ctypes.byref(step), err, _ERR_LEN)
        if rc == _lib.PG_NOT_FOUND:
            return ok
        if rc != _lib.PG_OK:
            ok = False
            what = "skipped" if rc == _lib.PG_SKIPPED else "not saved"
            print("peregrine: checkpoint of step %d %s: %s" % (step.value, what, err.value.decode(errors="replace")),
                  file=sys.stderr, flush=True)


def wait():
    """Waits for the snapshot save in flight, if any. Returns True when every snapshot
    save since the last report was published in the store, False when one was skipped or
    failed (each said on stderr). Without a library it returns True."""
    lib = _lib.lib()
    if lib is None:
        return True
    return _report(lib, block=True)


def _wait_at_exit():
    lib = _lib.lib() if _lib.loaded() else None
    if lib is not None:
        _report(lib, block=True)


atexit.register(_wait_at_exit)


def save(step, state, mode=None):
    """Saves `state` as this rank's checkpoint of `step` in the agent's store.

    mode: None (PEREGRINE_CHECKPOINT_MODE, default "snapshot"), "snapshot" or "copy".
    Returns True once the state is safe from the caller's later writes: in snapshot mode
    a forked child holds a copy-on-write image of it and writes the shard (its outcome is
    reported by the next save() or wait()); in copy mode the shard is published. Either
    way the agent then checksums, backs up and persists it. Returns False when the save
    was skipped (over this rank's memory allowance or no room: the reason goes to stderr
    and the agent records it) or there is no agent store. Raises TypeError naming the key
    path of an object that cannot be checkpointed, ValueError on a negative step or an
    unknown mode, RuntimeError when the store fails.
    """
    step = int(step)
    if step < 0:
        raise ValueError("checkpoint.save: step must be >= 0, not %d" % step)
    if mode not in _MODES:
        raise ValueError("checkpoint.save: mode must be 'snapshot' or 'copy', not %r" % (mode,))
    flat = _Flattener()
    skeleton = flat.walk(state, "state")
    lib = _lib.lib()
    if lib is None or not lib.pg_available():
        _lib.warn_once("no-store", _lib.NO_STORE_MESSAGE)
        return False
    _report(lib, block=True)  # the previous snapshot ends first; a failure is said now
    code = _MODES[mode]
    if flat.shared is not None and code != _lib.PG_MODE_COPY:
        code = _lib.PG_MODE_COPY  # fork would share, not snapshot, these pages
    segments, alive = _segments(flat)
    head = pickle.dumps({"format": _FORMAT, "step": step, "state": skeleton}, protocol=pickle.HIGHEST_PROTOCOL)
    n = len(segments) + 1
    data = (ctypes.c_void_p * n)()
    lengths = (ctypes.c_uint64 * n)()
    head_buffer = ctypes.create_string_buffer(head, len(head))
    data[0], lengths[0] = ctypes.addressof(head_buffer), len(head)
    for i, (address, length) in enumerate(segments, start=1):
        data[i], lengths[i] = address, length
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = lib.pg_save_mode(step, data, lengths, n, code, err, _ERR_LEN)
    del alive, head_buffer
    message = err.value.decode(errors="replace")
    if rc == _lib.PG_OK:
        return True
    if rc == _lib.PG_SKIPPED:
        print("peregrine: checkpoint of step %d skipped: %s" % (step, message), file=sys.stderr, flush=True)
        return False
    if rc == _lib.PG_NO_AGENT:
        _lib.warn_once("no-store", _lib.NO_STORE_MESSAGE)
        return False
    raise RuntimeError("checkpoint.save(step=%d): %s" % (step, message))


def _restore(lib, shard, ref):
    length = ctypes.c_uint64(0)
    address = lib.pg_shard_segment(shard, ref.segment, ctypes.byref(length))
    if address is None or ref.offset + ref.nbytes > length.value:
        raise RuntimeError("checkpoint shard: segment %d is missing or too short for a tensor of %d bytes" %
                           (ref.segment, ref.nbytes))
    if ref.kind == "numpy":
        import numpy
        dtype = numpy.dtype(ref.dtype if isinstance(ref.dtype, str) else [tuple(f) for f in ref.dtype])
        out = numpy.empty(ref.shape, dtype=dtype)
        if ref.nbytes:
            ctypes.memmove(out.ctypes.data, address + ref.offset, ref.nbytes)
        return out
    import torch
    out = torch.empty(ref.shape, dtype=getattr(torch, ref.dtype))
    if out.numel() * out.element_size() != ref.nbytes:
        raise RuntimeError("checkpoint shard: a tensor of shape %s and dtype %s is not %d bytes" %
                           (ref.shape, ref.dtype, ref.nbytes))
    if ref.nbytes:
        ctypes.memmove(out.data_ptr(), address + ref.offset, ref.nbytes)
    if ref.device != "cpu":
        out = out.to(ref.device)
    if ref.parameter:
        return torch.nn.Parameter(out, requires_grad=ref.requires_grad)
    if ref.requires_grad:
        out.requires_grad_(True)
    return out


def _rebuild(lib, shard, obj, restored):
    t = type(obj)
    if t is _TensorRef:
        if obj.ident not in restored:
            restored[obj.ident] = _restore(lib, shard, obj)
        return restored[obj.ident]
    if t is dict or t is collections.OrderedDict:
        out = t()
        for k, v in obj.items():
            out[k] = _rebuild(lib, shard, v, restored)
        return out
    if t is list:
        return [_rebuild(lib, shard, v, restored) for v in obj]
    if t is tuple:
        return tuple(_rebuild(lib, shard, v, restored) for v in obj)
    if isinstance(obj, tuple) and hasattr(t, "_fields") and t.__module__ != "torch":
        return t(*[_rebuild(lib, shard, v, restored) for v in obj])
    return obj


def load(step=None):
    """Loads this rank's checkpoint of `step` (default: the step the agent asks to resume,
    PEREGRINE_RESUME_STEP). Returns (step, state), or (0, None) on a fresh start (no
    resume step) or without an agent store.

    Raises FileNotFoundError when the agent asks for a step this rank has no shard of,
    RuntimeError when the shard is corrupt or partial (it is never returned).
    """
    lib = _lib.lib()
    if lib is None:
        _lib.warn_once("no-store", _lib.NO_STORE_MESSAGE)
        return 0, None
    step = int(lib.pg_resume_step() if step is None else step)
    if step == 0 or not lib.pg_available():
        return 0, None
    shard = ctypes.c_void_p()
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = lib.pg_load(step, ctypes.byref(shard), err, _ERR_LEN)
    message = err.value.decode(errors="replace")
    if rc == _lib.PG_NO_AGENT:
        return 0, None
    if rc == _lib.PG_NOT_FOUND:
        raise FileNotFoundError("checkpoint.load(step=%d): %s" % (step, message))
    if rc != _lib.PG_OK:
        raise RuntimeError("checkpoint.load(step=%d): %s" % (step, message))
    try:
        length = ctypes.c_uint64(0)
        address = lib.pg_shard_segment(shard, 0, ctypes.byref(length))
        if address is None or lib.pg_shard_segment_count(shard) < 1:
            raise RuntimeError("checkpoint.load(step=%d): the shard has no skeleton segment" % step)
        head = pickle.loads(ctypes.string_at(address, length.value))
        if not isinstance(head, dict) or head.get("format") != _FORMAT:
            raise RuntimeError("checkpoint.load(step=%d): the shard was not written by this package" % step)
        state = _rebuild(lib, shard, head["state"], {})
    finally:
        lib.pg_shard_close(shard)
    return step, state
