"""The tenure process: CLI, config, runner, metrics and health, the embedded ZooKeeper, producer, drills."""

__version__ = "0.1.0"
