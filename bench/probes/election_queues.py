"""What one session's elections of N queues cost: ZooKeeper requests, CPU, threads; and how long electing them,
and losing them with the session, take.

`.venv/bin/python -m bench.probes.election_queues [OUT_DIR]` starts a one-server embedded ensemble and, for N in 1,
8 and 64, one kazoo client (a 10 s session, as compose's) running an ``Election`` per queue of a group of N, as a
replica of N queues does. It measures the seconds from starting them to every queue elected (``elect_s``); over
20 s of steady leading, the requests the server received per second (``mntr``'s ``zk_packets_received``) and the
process's CPU seconds per second (``process_time``, every thread); its threads; then, a second client following
in every line, the seconds from expiring the first session to every term revoked (``revoke_s``) and to every queue
elected in the second (``takeover_s``). Writes ``OUT_DIR/elections.json`` and ``elections.md`` (default
``bench/results/issue-51-queues``), which ``docs/concepts/seats.md`` quotes.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tenure.election import Elected, Election, ElectionEvent, Identity, Revoked, four_letter_word
from tenure.service.local import running_ensemble, wait_for

SESSION_S = 10.0
STEADY_S = 20.0
COUNTS = (1, 8, 64)


def _packets(host: str, port: int) -> int:
    found = re.search(r"^zk_packets_received\s+(\d+)", four_letter_word(host, port, "mntr"), re.M)
    assert found, "mntr answered no zk_packets_received"
    return int(found.group(1))


def _elections(hosts: str, group: str, name: str, queues: int,
               seen: dict[str, list[ElectionEvent]]) -> tuple[KazooClient, list[Election]]:
    client = KazooClient(hosts=hosts, timeout=SESSION_S)
    client.start(timeout=15)
    lock = threading.Lock()

    def record(event: ElectionEvent) -> None:
        with lock:
            seen.setdefault(name, []).append(event)

    elections = [Election(client, group=group, queue=q, queues=queues, identity=Identity.local(name), on_event=record)
                 for q in range(queues)]
    for election in elections:
        election.start()
    return client, elections


def _count(seen: dict[str, list[ElectionEvent]], name: str, kind: type[Any]) -> Callable[[], int]:
    return lambda: len({e.queue for e in list(seen.get(name, [])) if isinstance(e, kind)})


def _measure(hosts: str, host: str, port: int, queues: int) -> dict[str, float]:
    group = f"probe-{queues}-{int(time.time())}"
    seen: dict[str, list[ElectionEvent]] = {}
    started = time.monotonic()
    leader, mine = _elections(hosts, group, "r1", queues, seen)
    wait_for(lambda: _count(seen, "r1", Elected)() == queues, 60, "every queue elected")
    elect_s = time.monotonic() - started
    time.sleep(2.0)  # past the first ticks
    packets, cpu, wall = _packets(host, port), time.process_time(), time.monotonic()
    time.sleep(STEADY_S)
    wall = time.monotonic() - wall
    requests = (_packets(host, port) - packets - 1) / wall  # the last mntr is one packet itself
    cpu_per_s = (time.process_time() - cpu) / wall
    threads = threading.active_count()
    follower, theirs = _elections(hosts, group, "r2", queues, seen)
    time.sleep(1.0)
    session_id, password = leader.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=SESSION_S)
    expired = time.monotonic()
    twin.start(timeout=15)
    twin.stop()
    twin.close()
    wait_for(lambda: _count(seen, "r1", Revoked)() == queues, 60, "every term revoked")
    revoke_s = time.monotonic() - expired
    wait_for(lambda: _count(seen, "r2", Elected)() == queues, 60, "every queue elected in the follower")
    takeover_s = time.monotonic() - expired
    for client, elections in ((leader, mine), (follower, theirs)):
        for election in elections:
            election.close(timeout_s=2.0)
        client.stop()
        client.close()
    return {"queues": queues, "elect_s": round(elect_s, 3), "requests_per_s": round(requests, 1),
            "cpu_per_s": round(cpu_per_s, 4), "threads": threads, "revoke_s": round(revoke_s, 3),
            "takeover_s": round(takeover_s, 3)}


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("bench/results/issue-51-queues")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch, running_ensemble(Path(scratch), servers=1) as ensemble:
        host, _, port = ensemble.connect_string.split(",")[0].rpartition(":")
        rows = [_measure(ensemble.connect_string, host, int(port), queues) for queues in COUNTS]
    (out / "elections.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| queues | elect s | requests/s | CPU s/s | threads | revoke s | takeover s |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['queues']} | {r['elect_s']} | {r['requests_per_s']} | {r['cpu_per_s']} | {r['threads']} | "
              f"{r['revoke_s']} | {r['takeover_s']} |" for r in rows]
    (out / "elections.md").write_text(
        "# One session's elections of N queues (`python -m bench.probes.election_queues`)\n\n"
        f"A 10 s session, one embedded ZooKeeper server, {STEADY_S:g} s of steady leading; both clients in one "
        "process (threads: the leader's before the follower started).\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
