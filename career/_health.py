"""Whether a career's storage can take its work: the folder writable, enough disk free.

Checked by the runner every few seconds through ``Career.unhealthy``: a replica whose career cannot work leaves
the election (handing over first when it leads) instead of failing batches, and rejoins once this passes again.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

__all__ = ["storage_problem"]

# One name per process: replicas share the data root, and a probe another replica unlinks under us is no fault.
_PROBE = f".tenure-health-{socket.gethostname()}-{os.getpid()}"


def storage_problem(folder: Path, min_free_bytes: int) -> str | None:
    """Why ``folder`` cannot take writes now (a one-line reason), or None when it can.

    Writes, fsyncs and deletes a small probe file: a folder that is gone, a read-only or unmounted volume, a full
    disk all fail here, as they would under the career's own writes.
    """
    probe = folder / _PROBE
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"ok\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        return f"data root {folder} is not writable ({exc.strerror or exc})"
    if free < min_free_bytes:
        return (f"data root {folder} has {free // (1 << 20)} MiB free, below the {min_free_bytes // (1 << 20)} MiB "
                "minimum (--min-free-disk-mb)")
    return None
