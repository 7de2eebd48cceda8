"""The Spark career's own errors, both :class:`TenureError` subclasses (hooks have ``HookError`` in ``_hooks``)."""

from __future__ import annotations

from tenure.errors import TenureError

__all__ = ["CommitRecordError", "HandingOverError", "SparkCareerError", "TornFileError"]


class SparkCareerError(TenureError):
    """The Spark career cannot go on (the streaming query died, or it was driven out of order)."""


class HandingOverError(SparkCareerError):
    """A batch refused to start because the term is ending; Spark re-runs it from the checkpoint later."""


class CommitRecordError(SparkCareerError):
    """The group's commit record names a path the data root's layout would not build for its epoch and batch: a
    record tenure did not write (``_record``). Refused whole; nothing it names is touched."""


class TornFileError(SparkCareerError):
    """A file of the checkpoint or a Delta log came back empty or torn from a power loss and no re-run rebuilds it
    (``_recovery``): the term does not begin; the message names the file and the fix."""
