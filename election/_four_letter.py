"""ZooKeeper's four-letter admin words (``srvr``, ``conf``, ``ruok`` …): a replica asks the ensemble's session
bounds with ``conf``; the embedded ensemble asks each server's role with ``srvr``."""

from __future__ import annotations

import socket

__all__ = ["four_letter_word"]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command (``srvr``, ``ruok``, ``wchp`` …) and return the reply."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")
