"""A replica's ``/metrics`` read from outside, as Prometheus would: what the status view, the drills and the tests
see of a running replica."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["sample_key", "scrape"]


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
