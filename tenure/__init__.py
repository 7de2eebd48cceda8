"""tenure: a leader-elected, single-writer Spark consumer.

One installed name with three rooms: ``tenure.election`` (the ZooKeeper recipe: join, lead, the epoch and the
fenced commit), ``tenure.career`` (the leadership lifecycle and its careers, Spark's among them) and
``tenure.service`` (the replica process, operators' tools, local infrastructure, drills). In the repository the
rooms are the top-level folders ``election/``, ``career/`` and ``service/``; ``tenure/`` links them under one name.
Beneath the rooms, the foundation floor: ``tenure.settings`` (each setting declared once). Importing ``tenure``
imports none of the rooms, so the lowest floor can use it.
"""

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed distribution on first use: every Python process Spark starts
    imports this package (its launcher, ``tenure-spark-python``), and reading package metadata takes it 0.06 s."""
    if name != "__version__":
        raise AttributeError(f"module 'tenure' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("tenure")
    except PackageNotFoundError:  # a source tree that was never installed (pyproject.toml holds the version)
        found = "0+unknown"
    globals()["__version__"] = found
    return found
