"""The identity of a queue and of a data root: an id written once in each folder, so a group is tied to its data
rather than to the paths it is reached by.

- A queue folder holds ``_topic.json`` (:data:`TOPIC_FILE`): ``{"topic_id": "<uuid4>", "queues": N}``, written by
  the first replica or producer that finds none: N is the number of queues of the topic, fixed when it is created
  (``--queues``, default 1; a folder that has a ``landing/`` already is a topic of one queue of an earlier release).
  A replica, producer or audit told another number refuses, naming both and the file.
- A data root holds ``_data_root.json`` (:data:`DATA_ROOT_FILE`): ``{"data_root_id": "<uuid4>"}``, written by the
  first replica that finds none.

Each is written once, atomically and without overwriting: its content goes to a hidden name, is fsynced, then
linked to the final name, which fails if another writer got there first (a rename would replace its file, and
the two would go on with different ids); the loser reads the winner's. The leading ``_`` hides both from every
reader of the folder (:func:`tenure.career.queue.is_hidden`). A folder reached by two paths (a symlink, a bind
mount, another host's mount point) has one id.

Pure Python, so operator tools (``tenure produce``, ``tenure verify``) import it cheaply.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenure.career._durable import fsync
from tenure.career.queue import QueueLayout
from tenure.errors import ConfigError

__all__ = ["DATA_ROOT_FILE", "TOPIC_FILE", "Topic", "ensure_data_root_id", "ensure_topic", "read_data_root_id",
           "read_topic"]

TOPIC_FILE = "_topic.json"
"""A queue folder's identity file."""

DATA_ROOT_FILE = "_data_root.json"
"""A data root's identity file."""


@dataclass(frozen=True)
class Topic:
    """A queue folder's identity: its topic's id and number of queues."""

    topic_id: str
    queues: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"topic_id": self.topic_id, "queues": self.queues}

    def check(self, queues: int | None, path: Path) -> None:
        """Refuse ``queues`` (a ``--queues`` given) other than this topic's number, read from ``path``; None: any.

        Raises:
            ConfigError: naming both numbers, the file and the fix.
        """
        if queues is not None and queues != self.queues:
            raise ConfigError(f"--queues {queues} does not match the topic at {path.parent}, which has "
                              f"{self.queues} queue{'s' if self.queues != 1 else ''} ({path}): pass --queues "
                              f"{self.queues} or use another queue folder")


def _read(path: Path, field: str) -> dict[str, Any] | None:
    """The JSON object of an identity file (None when absent), checked to name ``field`` as a non-empty string."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a readable identity file ({type(exc).__name__}: {exc}): restore it from a "
                          "copy of the folder, or delete it if this folder was never used by a group") from exc
    if not isinstance(data, dict) or not isinstance(data.get(field), str) or not data[field]:
        raise ConfigError(f"{path} holds no {field}: restore it from a copy of the folder, or delete it if this "
                          "folder was never used by a group")
    return data


def _create(path: Path, data: dict[str, Any]) -> bool:
    """Write ``data`` to ``path`` unless it exists: a hidden file, fsynced, linked to ``path`` (no overwrite), then
    the folder fsynced. Returns whether this call created it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        with partial.open("x") as handle:
            handle.write(json.dumps(data, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(partial, path)
        except FileExistsError:
            return False
        fsync(path.parent, directory=True)
        return True
    finally:
        partial.unlink(missing_ok=True)


def _topic(path: Path, data: dict[str, Any]) -> Topic:
    queues = data.get("queues", 1)
    if isinstance(queues, bool) or not isinstance(queues, int) or queues < 1:
        raise ConfigError(f"{path} says the topic has queues={queues!r}, not a number of queues: restore the file "
                          "from a copy of the folder")
    return Topic(topic_id=data["topic_id"], queues=queues)


def read_topic(queue_dir: Path, queues: int | None = None) -> Topic | None:
    """The topic of the queue folder ``queue_dir``; None when it has no ``_topic.json`` yet.

    Args:
        queue_dir: the topic's folder.
        queues: the number of queues the caller was given (``--queues``), checked against the topic's; None: any.

    Raises:
        ConfigError: the file is unreadable or names no number of queues, or another number than ``queues``.
    """
    path = queue_dir / TOPIC_FILE
    data = _read(path, "topic_id")
    if data is None:
        return None
    topic = _topic(path, data)
    topic.check(queues, path)
    return topic


def ensure_topic(queue_dir: Path, queues: int | None = None) -> Topic:
    """The topic of the queue folder ``queue_dir``, its ``_topic.json`` written first if it has none: a topic of
    ``queues`` queues (None: 1), or of one when the folder has a ``landing/`` already (a queue of an earlier
    release, which is a topic of one queue).

    Raises:
        ConfigError: as :func:`read_topic`; ``queues`` is not a number of queues.
    """
    if queues is not None:
        QueueLayout(queue_dir, 0, queues)  # a number of queues, or refused before anything is written
    topic = read_topic(queue_dir)
    if topic is None:
        legacy = QueueLayout(queue_dir).landing.is_dir()
        created = Topic(topic_id=str(uuid.uuid4()), queues=1 if legacy or queues is None else queues)
        _create(queue_dir / TOPIC_FILE, created.to_json())
        topic = read_topic(queue_dir)  # this call's, or a writer's that came first
        assert topic is not None, f"{queue_dir / TOPIC_FILE} was just written"
    topic.check(queues, queue_dir / TOPIC_FILE)
    return topic


def read_data_root_id(data_root: Path) -> str | None:
    """The id of the data root ``data_root``; None when it has no ``_data_root.json`` yet.

    Raises:
        ConfigError: the file is unreadable.
    """
    data = _read(data_root / DATA_ROOT_FILE, "data_root_id")
    return None if data is None else str(data["data_root_id"])


def ensure_data_root_id(data_root: Path) -> str:
    """The id of the data root ``data_root``, its ``_data_root.json`` written first if it has none.

    Raises:
        ConfigError: as :func:`read_data_root_id`.
    """
    found = read_data_root_id(data_root)
    if found is None:
        _create(data_root / DATA_ROOT_FILE, {"data_root_id": str(uuid.uuid4())})
        found = read_data_root_id(data_root)
        assert found is not None, f"{data_root / DATA_ROOT_FILE} was just written"
    return found
