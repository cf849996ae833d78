"""C++ symbol demangling through libstdc++'s own __cxa_demangle (no subprocess, no c++filt)."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache


@lru_cache(maxsize=1)
def _functions() -> tuple[object, object] | None:
    try:
        stdcxx = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    demangle = stdcxx.__cxa_demangle
    demangle.restype = ctypes.c_void_p
    demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]
    return demangle, free


@lru_cache(maxsize=65536)
def demangle(symbol: str) -> str:
    """The C++ form of ``symbol``, or ``symbol`` itself when it is not mangled or cannot be read."""
    funcs = _functions()
    if funcs is None or not symbol.startswith("_Z"):
        return symbol
    cxa_demangle, free = funcs
    status = ctypes.c_int(0)
    pointer = cxa_demangle(symbol.encode(), None, None, ctypes.byref(status))  # type: ignore[operator]
    if status.value != 0 or not pointer:
        return symbol
    try:
        return ctypes.string_at(pointer).decode(errors="replace")
    finally:
        free(pointer)  # type: ignore[operator]
