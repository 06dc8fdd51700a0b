"""Signals held while a step must not stop halfway (standard library only: the command line
takes it before NumPy is imported)."""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM while the block runs, then deliver them: for steps that must not
    stop halfway (renames that replace a set of files and the record that they did; imports of
    C extensions, which an interruption can turn into an ImportError). Only where Python runs
    its handlers (the main thread), and only signals with a handler of Python's (Ctrl-C's, the
    command line's SIGTERM): elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    saved = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if callable(handler):
            saved[sig] = handler
            signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)                 # its own handler, now
