"""Whether a career's storage can take its work: the folder writable, enough disk free.

Checked by the runner every few seconds through ``Career.unhealthy``: a replica whose career cannot work leaves
the election (handing over first when it leads) instead of failing batches, and rejoins once this passes again.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tenure.career._deadline import Probe
from tenure.errors import ConfigError, Unresponsive
from tenure.settings import setting

__all__ = ["HealthSettings", "StorageHealth", "storage_problem"]

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


@dataclass(frozen=True, kw_only=True)
class HealthSettings:
    """How a career checks that it can work, shared by every career (``tenure run``'s flags of the same names).

    Example::

        HealthSettings(probe_timeout_s=3.0).min_free_bytes  # 536870912
    """

    probe_timeout_s: float = setting(
        10.0, unit="s", help="Deadline of every call into Spark's JVM from the control thread and of the storage "
        "probe: no answer makes a follower unhealthy and a leader give its lock up.",
        hazard="Below the longest stop-the-world GC pause the driver sees, a pause becomes a failover; it must "
        "stay below liveness_timeout_s, or a probe outlasts the control loop's liveness.")
    min_free_disk_mb: int = setting(
        512, unit="MiB", help="Below this much free disk on the data root (or the queue's volume) the replica "
        "leaves the election (handing over first) until there is room again; 0: no minimum.",
        hazard="At 0 a full disk shows only as failing batches.")

    def __post_init__(self) -> None:
        if self.probe_timeout_s <= 0:
            raise ConfigError(f"probe_timeout_s={self.probe_timeout_s:g} is not above 0 seconds; raise it")
        if self.min_free_disk_mb < 0:
            raise ConfigError(f"min_free_disk_mb={self.min_free_disk_mb} is negative: use 0 to turn the check off")

    @property
    def min_free_bytes(self) -> int:
        return self.min_free_disk_mb << 20


class StorageHealth:
    """A career's storage check: each folder probed with :func:`storage_problem` under a deadline.

    A probe that does not return within ``timeout_s`` (a hung NFS mount, a dying disk) makes the storage
    unhealthy at once, and while it stays stuck every later check says so without starting another probe.

    Example::

        storage = StorageHealth([data_root], min_free_bytes=512 << 20, timeout_s=10)
        reason = storage.problem()     # None when every folder takes writes
    """

    def __init__(self, folders: Iterable[Path], *, min_free_bytes: int, timeout_s: float) -> None:
        self._min_free_bytes = min_free_bytes
        self._probes = {folder: Probe(f"data root {folder}", timeout_s) for folder in dict.fromkeys(folders)}

    def problem(self) -> str | None:
        """Why a folder cannot take writes now, or None."""
        for folder, probe in self._probes.items():
            try:
                problem = probe(functools.partial(storage_problem, folder, self._min_free_bytes))
            except Unresponsive as exc:
                return f"{exc}: a write probe is stuck (hung file system?)"
            if problem is not None:
                return problem
        return None
