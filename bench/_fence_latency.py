"""Fenced commit latency: ``Fence.commit`` in a loop against the embedded 3-server ensemble, vs a bare set."""

from __future__ import annotations

import queue
import time

from kazoo.client import KazooClient

from bench._common import ENSEMBLE_ATTEMPTS, ENSEMBLE_START_S, BenchContext, Result, Target, percentiles
from tenure.election import Elected, Election, ElectionEvent, Identity
from tenure.service.local import Ensemble, running_ensemble

__all__ = ["run_fence_latency"]

_SESSION_TIMEOUT_S = 10.0


def _record(batch: int) -> dict[str, object]:
    # Shaped like the Spark career's commit record, so the payload size is realistic.
    return {"batch_id": batch, "published": f"table/batch={batch}", "committed_at": time.time(),
            "counts": {"written": 100_000, "duplicate": 12, "quarantined": 3}, "replica_id": "bench"}


def run_fence_latency(ctx: BenchContext) -> Result:
    """Time ``n`` fenced commits and ``n`` plain version-checked ``set_data`` calls, interleaved."""
    n = 200 if ctx.quick else 5000
    warmup = 20 if ctx.quick else 200
    result = Result(
        name="fence_latency",
        title="Fenced commit latency",
        command="python -m bench.run --only fence_latency",
        params={"commits": n, "warmup": warmup, "zk_servers": 3, "zk_tick_ms": Ensemble.DEFAULT_TICK_MS,
                "session_timeout_s": _SESSION_TIMEOUT_S},
    )
    with running_ensemble(ctx.work / "zk", timeout_s=ENSEMBLE_START_S, attempts=ENSEMBLE_ATTEMPTS) as ensemble:
        client = KazooClient(hosts=ensemble.connect_string, timeout=_SESSION_TIMEOUT_S)
        client.start(timeout=30)
        events: queue.Queue[ElectionEvent] = queue.Queue()
        election = Election(client, group="bench-fence", identity=Identity.local("bench"), on_event=events.put)
        try:
            election.start()
            deadline = time.monotonic() + 30
            while not isinstance(events.get(timeout=max(0.1, deadline - time.monotonic())), Elected):
                pass
            fence = election.fence()
            _, version = fence.read_commit()
            plain_path = "/bench-fence-plain"
            client.ensure_path(plain_path)
            plain_version = client.exists(plain_path).version
            fenced: list[float] = []
            plain: list[float] = []
            # Interleaved one by one, so both see the same ensemble, disk and scheduler noise.
            for i in range(warmup + n):
                data = _record(i)
                t0 = time.perf_counter()
                version = fence.commit(data, expected_version=version)
                t1 = time.perf_counter()
                plain_version = client.set(plain_path, repr(data).encode(), version=plain_version).version
                t2 = time.perf_counter()
                if i >= warmup:
                    fenced.append((t1 - t0) * 1000)
                    plain.append((t2 - t1) * 1000)
        finally:
            election.close(timeout_s=5)
            client.stop()
            client.close()
    stats_f, stats_p = percentiles(fenced), percentiles(plain)
    result.figures = {"fenced_ms": stats_f, "plain_set_ms": stats_p,
                      "fenced_per_s": round(1000 / stats_f["mean"], 1) if stats_f["mean"] else None}
    result.table = [
        {"operation": "Fence.commit (check + set_data in one multi)", **_ms(stats_f)},
        {"operation": "baseline: set_data(version) alone, unfenced", **_ms(stats_p)},
    ]
    p99 = stats_f["p99"]
    result.targets.append(Target("fenced commit p99 (ms)", float(p99) if p99 is not None else None,
                                 "≤ 10 ms", p99 is not None and p99 <= 10.0))
    if stats_f["p50"] and stats_p["p50"]:
        result.figures["p50_ratio_fenced_over_plain"] = round(float(stats_f["p50"]) / float(stats_p["p50"]), 3)
    result.notes.append("One client in the bench process, a 3-server ensemble on this machine (fsync to the "
                        "local disk on every write); the two loops are interleaved call by call.")
    return result


def _ms(stats: dict[str, float | int | None]) -> dict[str, object]:
    return {k: (round(float(v), 3) if isinstance(v, float) else v) for k, v in stats.items()}
