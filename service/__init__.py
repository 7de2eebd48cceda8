"""tenure's processes and tools, by job: ``replica`` (``tenure run``), ``ops`` (status, verify, groups, produce),
``local`` (embedded ZooKeeper, topologies, up, demo) and ``drill``; ``cli`` dispatches to them."""
