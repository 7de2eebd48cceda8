"""A replica's ``/metrics`` read from outside, as Prometheus would: what the status view, the drills and the tests
see of a running replica."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["by_queue", "sample_key", "scrape"]


def sample_key(metric: str, **labels: str) -> str:
    """How :func:`scrape` names a sample: ``name{label=value,…}``, labels sorted (a Counter's name ends ``_total``)."""
    inner = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}" if inner else metric


def scrape(port: int, timeout_s: float = 1.0, host: str = "127.0.0.1") -> dict[str, float]:
    """A replica's /metrics as {sample name with sorted labels: value}; empty when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout_s) as resp:
            body = resp.read().decode()
    except (OSError, urllib.error.URLError):
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out[sample_key(sample.name, **sample.labels)] = sample.value
    return out


def by_queue(metrics: dict[str, float], metric: str, **labels: str) -> dict[int, float]:
    """The samples of ``metric`` with ``labels`` in a :func:`scrape`, by queue: a group of several queues labels each
    with its ``queue``; a group of one exports them unlabelled, which is queue 0's.

    Example::

        by_queue(scrape(9400), "tenure_is_leader")                            # {0: 1.0, 1: 0.0, 2: 1.0}
        sum(by_queue(scrape(9400), "tenure_batches_total", outcome="committed").values())
    """
    found: dict[int, float] = {}
    if (plain := metrics.get(sample_key(metric, **labels))) is not None:
        found[0] = plain
    for key, value in metrics.items():
        name, _, inner = key.partition("{")
        if name != metric or not inner:
            continue
        sample = dict(pair.split("=", 1) for pair in inner.rstrip("}").split(","))
        queue = sample.pop("queue", None)
        if queue is not None and sample == labels:
            found[int(queue)] = value
    return dict(sorted(found.items()))
