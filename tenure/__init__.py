"""tenure: a leader-elected, single-writer Spark consumer.

One installed name with three rooms: ``tenure.election`` (the ZooKeeper recipe: join, lead, the epoch and the
fenced commit), ``tenure.career`` (the leadership lifecycle and its careers, Spark's among them) and
``tenure.service`` (the replica process, operators' tools, local infrastructure, drills). In the repository the
rooms are the top-level folders ``election/``, ``career/`` and ``service/``; ``tenure/`` links them under one name.
"""

from tenure.service import __version__

__all__ = ["__version__"]
