"""The handler process of the ordered consumer's process mode, run as a script by _processes.py
(standard library only, so that it starts without importing velamq).

It reads frames (4-byte little-endian length, then a pickle) from stdin: first the parent's
multiprocessing preparation data (sys.path, the main module, so that a handler defined in the
parent's script unpickles here as it does under multiprocessing's spawn), then the handler and
its retry settings, then lists of (sequence number, Message) to run, in order, one at a time. A
reader thread keeps taking frames so that the parent never blocks on a full pipe; the frame b"stop"
makes the process exit after the message it runs.

For each message it writes one result frame to its original stdout, as soon as the handler
returns: its sequence number alone (8 bytes) for a success; a pickled (seq, "failed", text) for
each failed call, retried here with the parent's backoff (so later messages of the same keys
wait); a pickled (seq, "gave_up", text) after max_attempts (the parent dead-letters it).
Results leave one by one: after a crash, only the message that was running is run again. The
handler's own prints go to stderr.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import sys
import threading
from typing import Any, BinaryIO

_LEN = struct.Struct("<I")
_OK = struct.Struct("<q")  # a success is just its sequence number: 8 bytes, no pickle


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = _LEN.unpack(head)
    body = stream.read(size)
    return body if len(body) == size else None


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _reader(stream: BinaryIO, inbox: queue.SimpleQueue[Any], stop: threading.Event) -> None:
    while True:
        frame = read_frame(stream)
        if frame is None or frame == b"stop":
            stop.set()
            inbox.put(None)
            return
        inbox.put(pickle.loads(frame))


def _run(handler: Any, seq: int, message: Any, retry: tuple[int | None, int, int], out: BinaryIO,
         stop: threading.Event) -> bool:
    """Call until it succeeds or gives up (True), or the process is told to stop (False)."""
    max_attempts, initial_ms, max_ms = retry
    attempts = 0
    while True:
        attempts += 1
        try:
            handler(message)
            write_frame(out, _OK.pack(seq))
            return True
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}"
        if max_attempts is not None and attempts >= max_attempts:
            write_frame(out, pickle.dumps((seq, "gave_up", text)))
            return True
        write_frame(out, pickle.dumps((seq, "failed", text)))
        delay_ms = min(initial_ms * (1 << min(attempts - 1, 30)), max_ms)
        if stop.wait(delay_ms / 1000):
            return False


def main() -> None:
    # Frames go to the original stdout; what the handler prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    frame = read_frame(stdin)
    if frame is None:
        return
    import multiprocessing.spawn

    multiprocessing.spawn.prepare(pickle.loads(frame))
    frame = read_frame(stdin)
    if frame is None:
        return
    handler, retry = pickle.loads(frame)
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    stop = threading.Event()
    threading.Thread(target=_reader, args=(stdin, inbox, stop), daemon=True).start()
    write_frame(out, pickle.dumps((-1, "ready", None)))
    while True:
        items = inbox.get()
        if items is None:
            return
        for seq, message in items:
            if stop.is_set() or not _run(handler, seq, message, retry, out, stop):
                return



if __name__ == "__main__":
    main()
