"""Finds and loads libperegrine_client.so (the C ABI in client/peregrine_client.h).

Where it looks: $PEREGRINE_CLIENT_LIB, else <this package>/../../lib/libperegrine_client.so
(the build tree's layout: build/python/peregrine/ beside build/lib/). When neither loads,
`lib()` returns None and the package falls back: progress lines are printed by Python,
checkpoint calls do nothing and say so once on stderr. Importing never fails.
"""

import ctypes
import os
import sys
import threading

PG_OK = 0
PG_SKIPPED = 1
PG_NO_AGENT = 2
PG_NOT_FOUND = 3
PG_ERROR = -1

PG_MODE_DEFAULT = 0
PG_MODE_COPY = 1
PG_MODE_SNAPSHOT = 2

NO_STORE_MESSAGE = "peregrine: no agent store; checkpoints are not kept"

_lock = threading.RLock()  # lib() warns (warn_once) while holding it
_loaded = False
_lib = None
_warned = set()


def _candidates():
    env = os.environ.get("PEREGRINE_CLIENT_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.normpath(os.path.join(here, "..", "..", "lib", "libperegrine_client.so"))


def _declare(lib):
    c = ctypes
    lib.pg_available.restype = c.c_int
    lib.pg_available.argtypes = []
    lib.pg_resume_step.restype = c.c_uint64
    lib.pg_resume_step.argtypes = []
    lib.pg_abi_version.restype = c.c_int
    lib.pg_abi_version.argtypes = []
    lib.pg_step.restype = c.c_int
    lib.pg_step.argtypes = [c.c_uint64, c.c_int, c.c_double, c.POINTER(c.c_char_p), c.POINTER(c.c_double),
                            c.c_size_t]
    lib.pg_save.restype = c.c_int
    lib.pg_save.argtypes = [c.c_uint64, c.POINTER(c.c_void_p), c.POINTER(c.c_uint64), c.c_uint32, c.c_char_p,
                            c.c_size_t]
    lib.pg_save_mode.restype = c.c_int
    lib.pg_save_mode.argtypes = [c.c_uint64, c.POINTER(c.c_void_p), c.POINTER(c.c_uint64), c.c_uint32, c.c_int,
                                 c.c_char_p, c.c_size_t]
    lib.pg_wait.restype = c.c_int
    lib.pg_wait.argtypes = [c.c_int, c.POINTER(c.c_uint64), c.c_char_p, c.c_size_t]
    lib.pg_load.restype = c.c_int
    lib.pg_load.argtypes = [c.c_uint64, c.POINTER(c.c_void_p), c.c_char_p, c.c_size_t]
    lib.pg_shard_step.restype = c.c_uint64
    lib.pg_shard_step.argtypes = [c.c_void_p]
    lib.pg_shard_segment_count.restype = c.c_uint32
    lib.pg_shard_segment_count.argtypes = [c.c_void_p]
    lib.pg_shard_segment.restype = c.c_void_p
    lib.pg_shard_segment.argtypes = [c.c_void_p, c.c_uint32, c.POINTER(c.c_uint64)]
    lib.pg_shard_close.restype = None
    lib.pg_shard_close.argtypes = [c.c_void_p]


def loaded():
    """True when lib() has been called (whether or not a library loaded)."""
    with _lock:
        return _loaded


def lib():
    """The loaded library, or None when there is none (the fallback)."""
    global _loaded, _lib
    with _lock:
        if _loaded:
            return _lib
        _loaded = True
        reasons = []
        for path in _candidates():
            if not os.path.exists(path):
                reasons.append(path + ": no such file")
                continue
            try:
                candidate = ctypes.CDLL(path)
                _declare(candidate)
            except (OSError, AttributeError) as e:
                reasons.append("%s: %s" % (path, e))
                continue
            if candidate.pg_abi_version() != 1:
                reasons.append("%s: ABI version %d, this package speaks 1" % (path, candidate.pg_abi_version()))
                continue
            _lib = candidate
            return _lib
        if os.environ.get("PEREGRINE_CLIENT_LIB"):
            # The agent named a library that does not load: say why, once.
            warn_once("load", "peregrine: cannot load the client library (%s)" % "; ".join(reasons))
        return None


def warn_once(key, message):
    """Prints `message` on stderr the first time `key` is seen in this process."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    print(message, file=sys.stderr, flush=True)
