"""The identity of a queue and of a data root: an id written once in each folder, so a group is tied to its data
rather than to the paths it is reached by.

- A queue folder holds ``_topic.json`` (:data:`TOPIC_FILE`): ``{"topic_id": "<uuid4>", "queues": 1}``, written by
  the first replica or producer that finds none. ``queues`` is the number of queues of the topic, for a coming
  feature (a topic of N queues): only 1 is accepted for now.
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
from tenure.errors import ConfigError

__all__ = ["DATA_ROOT_FILE", "TOPIC_FILE", "Topic", "ensure_data_root_id", "ensure_topic", "read_data_root_id",
           "read_topic"]

TOPIC_FILE = "_topic.json"
"""A queue folder's identity file."""

DATA_ROOT_FILE = "_data_root.json"
"""A data root's identity file."""

_QUEUES_SUPPORTED = 1


@dataclass(frozen=True)
class Topic:
    """A queue folder's identity: its topic's id and number of queues (1 until topics of several queues come)."""

    topic_id: str
    queues: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"topic_id": self.topic_id, "queues": self.queues}


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
    if queues != _QUEUES_SUPPORTED:
        raise ConfigError(f"{path} says the topic has queues={queues!r}, and this release reads topics of one queue "
                          "only: run a release that reads topics of several queues, or use a queue folder of its own")
    return Topic(topic_id=data["topic_id"], queues=queues)


def read_topic(queue_dir: Path) -> Topic | None:
    """The topic of the queue folder ``queue_dir``; None when it has no ``_topic.json`` yet.

    Raises:
        ConfigError: the file is unreadable, or names a topic of several queues (not read by this release).
    """
    path = queue_dir / TOPIC_FILE
    data = _read(path, "topic_id")
    return None if data is None else _topic(path, data)


def ensure_topic(queue_dir: Path) -> Topic:
    """The topic of the queue folder ``queue_dir``, its ``_topic.json`` written first if it has none.

    Raises:
        ConfigError: as :func:`read_topic`.
    """
    topic = read_topic(queue_dir)
    if topic is None:
        _create(queue_dir / TOPIC_FILE, Topic(topic_id=str(uuid.uuid4())).to_json())
        topic = read_topic(queue_dir)  # this call's, or a writer's that came first
        assert topic is not None, f"{queue_dir / TOPIC_FILE} was just written"
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
