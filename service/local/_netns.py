"""Network namespace plumbing for drills: one namespace per replica under test, a veth pair to the host.

Each ``NetNamespace`` owns a namespace ``tenure-drill-<k>`` and a veth pair ``tdr<k>h`` (host) ↔ ``tdr<k>n``
(namespace) with the private /30 ``10.231.<k>.0/30``: the host end is ``.1``, the namespace end ``.2``. Traffic
flows only between the host and that namespace: no default route, no forwarding, no other address. A cut takes
the namespace end down (the host end stays up, so the host address keeps serving local clients); a heal brings it
back. ``tc netem`` shapes both ends for a flaky link. Everything is removed on ``close()``, even after a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import structlog

from tenure.errors import TenureError

__all__ = ["NetNamespace", "NetnsError", "netns_unavailable"]

_log = structlog.get_logger("tenure.netns")

NAME_PREFIX = "tenure-drill-"
_MAX_SLOTS = 64


class NetnsError(TenureError):
    """A namespace, veth or qdisc operation failed; the message names the command and its error."""


def netns_unavailable() -> str | None:
    """Why network drills cannot run here (not root, no ``ip`` or ``tc``), or ``None`` when they can."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces (run as root, or in CI)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` from iproute2 (apt-get install iproute2)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"`ip netns list` failed: {probe.stderr.strip() or probe.returncode}"
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(cmd), capture_output=True, text=True, check=False, timeout=30)
    if check and result.returncode != 0:
        raise NetnsError(f"`{' '.join(cmd)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _slot_taken(slot: int) -> bool:
    return (Path("/sys/class/net") / f"tdr{slot}h").exists() or \
        (Path("/var/run/netns") / f"{NAME_PREFIX}{slot}").exists()


class NetNamespace:
    """A namespace with a veth link to the host, for one replica.

    Example::

        with NetNamespace.create() as ns:
            cmd = [*ns.exec_prefix, *spec.command(zk=f"{ns.host_address}:2181", replica_id="r1",
                                                  metrics_host=ns.ns_address, metrics_port=9400)]
            ns.cut()     # the namespace loses the host
            ns.heal()
    """

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.name = f"{NAME_PREFIX}{slot}"
        self.host_if = f"tdr{slot}h"
        self.ns_if = f"tdr{slot}n"
        self.host_address = f"10.231.{slot}.1"
        self.ns_address = f"10.231.{slot}.2"
        self._closed = False

    @classmethod
    def create(cls) -> NetNamespace:
        """Pick a free slot, create the namespace and its link, and bring both ends up."""
        for slot in range(_MAX_SLOTS):
            if not _slot_taken(slot):
                ns = cls(slot)
                try:
                    ns._setup()
                except BaseException:
                    ns.close()
                    raise
                return ns
        raise NetnsError(f"all {_MAX_SLOTS} drill namespace slots are taken: remove stale ones with "
                         f"`ip netns del {NAME_PREFIX}<k>`")

    def _setup(self) -> None:
        # 1. The namespace and the veth pair, the namespace end moved inside.
        _run("ip", "netns", "add", self.name)
        _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _run("ip", "link", "set", self.ns_if, "netns", self.name)
        # 2. Addresses of the private /30 on the two veth ends only.
        _run("ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_if)
        _run("ip", "link", "set", self.host_if, "up")
        self._in_ns("ip", "addr", "add", f"{self.ns_address}/30", "dev", self.ns_if)
        self._in_ns("ip", "link", "set", "lo", "up")
        self._in_ns("ip", "link", "set", self.ns_if, "up")
        _log.info("netns_created", netns=self.name, host=self.host_address, ns=self.ns_address)

    def _in_ns(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run("ip", "netns", "exec", self.name, *cmd, check=check)

    @property
    def exec_prefix(self) -> list[str]:
        """Prepend to a command to run it inside the namespace (``ip netns exec`` execs, keeping the pid)."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Take the namespace end of the link down: the namespace can no longer reach the host."""
        self._in_ns("ip", "link", "set", self.ns_if, "down")
        _log.info("netns_cut", netns=self.name)

    def heal(self) -> None:
        """Bring the namespace end up again (its connected /30 route comes back with it)."""
        self._in_ns("ip", "link", "set", self.ns_if, "up")
        _log.info("netns_healed", netns=self.name)

    def shape(self, *, delay_ms: int, jitter_ms: int, loss_pct: float) -> None:
        """Add netem delay and loss on both ends of the link (each direction)."""
        netem = ["netem", "delay", f"{delay_ms}ms", f"{jitter_ms}ms", "loss", f"{loss_pct:g}%"]
        _run("tc", "qdisc", "replace", "dev", self.host_if, "root", *netem)
        self._in_ns("tc", "qdisc", "replace", "dev", self.ns_if, "root", *netem)
        _log.info("netns_shaped", netns=self.name, delay_ms=delay_ms, jitter_ms=jitter_ms, loss_pct=loss_pct)

    def unshape(self) -> None:
        """Remove the netem qdiscs (missing ones are fine)."""
        _run("tc", "qdisc", "del", "dev", self.host_if, "root", check=False)
        self._in_ns("tc", "qdisc", "del", "dev", self.ns_if, "root", check=False)
        _log.info("netns_unshaped", netns=self.name)

    def close(self) -> None:
        """Delete the veth pair and the namespace; safe to call twice and after a partial setup."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run("ip", "link", "del", self.host_if, check=False)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _run("ip", "netns", "del", self.name, check=False)
        _log.info("netns_removed", netns=self.name)

    def __enter__(self) -> NetNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
