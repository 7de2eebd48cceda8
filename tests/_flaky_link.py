"""A TCP link on loopback that a test cuts at will: every connection through it dropped, new ones refused a while.

A replica given the link's address as ``--zk`` reaches one ZooKeeper server through it; each cut is a real
connection loss for kazoo (SUSPENDED), and the reconnect after it a real resumption of the same session, so a
test can make a leader's ZooKeeper link flap without touching the ensemble.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

__all__ = ["FlakyLink", "flaky_link"]


class FlakyLink:
    """Forwards ``127.0.0.1:<port>`` to ``upstream``; :meth:`flap` cuts it every ``every_s`` for ``down_s``.

    Example::

        with flaky_link(("127.0.0.1", 2181)) as link:
            replica = start(zk=f"127.0.0.1:{link.port}")
            link.flap(every_s=1.5, down_s=0.3)
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._down = threading.Event()  # set while the link refuses connections
        self._closed = threading.Event()
        self.cuts = 0
        self._threads = [threading.Thread(target=self._accept, name="flaky-link-accept", daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), name="flaky-link-pump",
                                 daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(source, target)

    def _drop(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            with self._lock:
                self._open.discard(sock)

    def cut(self, down_s: float) -> None:
        """Drop every connection now and refuse new ones for ``down_s``."""
        self._down.set()
        with self._lock:
            current = list(self._open)
        self._drop(*current)
        self.cuts += 1
        self._closed.wait(down_s)
        self._down.clear()

    def flap(self, *, every_s: float, down_s: float) -> None:
        """Cut the link every ``every_s`` (each cut ``down_s`` long), on a thread of its own, until closed."""

        def run() -> None:
            while not self._closed.wait(every_s):
                self.cut(down_s)

        thread = threading.Thread(target=run, name="flaky-link-flap", daemon=True)
        self._threads.append(thread)
        thread.start()

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):  # wakes the accepting thread (a plain close does not, on Linux)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            current = list(self._open)
        self._drop(*current)
        for thread in self._threads:
            thread.join(timeout=5)


@contextlib.contextmanager
def flaky_link(upstream: tuple[str, int]) -> Iterator[FlakyLink]:
    """A :class:`FlakyLink` to ``upstream``, closed (its threads joined) on the way out, even on failure."""
    link = FlakyLink(upstream)
    try:
        yield link
    finally:
        link.close()
