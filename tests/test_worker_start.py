"""A query stopped by a Python worker that did not start in time is told from every other stop (the career starts
such a query again, a few times, instead of ending the term: ``SparkCareer._recover_query``)."""

from __future__ import annotations

import pytest

from tenure.career.spark._career import worker_did_not_start

#: What CI's log showed of a successor whose query stopped while it started (Spark 4's own words, then the query).
_SEEN_IN_CI = """Python worker failed to connect back.
=== Streaming Query ===
Identifier: tenure_r2_4294970610_0 [id = 8677a3c0-4c2f-45c4-b653-b68c02e380d3]
Current Committed Offsets: {}
Current State: INITIALIZING"""


@pytest.mark.parametrize("text", [
    _SEEN_IN_CI,
    "org.apache.spark.SparkException: Python worker failed to connect back.",
    "java.net.SocketTimeoutException: Timed out while waiting for the Python worker to connect back after 10000 ms",
])
def test_a_worker_that_did_not_connect_back_is_told_apart(text: str) -> None:
    """Spark's messages for a Python worker that did not connect back within its 10 s are recognised."""
    assert worker_did_not_start(text)


@pytest.mark.parametrize("text", [
    "None",
    "batch 3 failed: ValueError: bad record",
    "Python worker exited unexpectedly (crashed)",
    "org.apache.spark.api.python.PythonException: Traceback ... ConnectionRefusedError",
    "the streaming query stopped: StreamLost: stream q:0 lost entries",
])
def test_every_other_stop_is_not_taken_for_one(text: str) -> None:
    """A batch's failure, a crashed worker and a lost stream are not restarted as a worker that did not start."""
    assert not worker_did_not_start(text)
