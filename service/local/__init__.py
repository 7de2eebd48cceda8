"""Infrastructure on this machine: the embedded ZooKeeper ensemble, replica processes and their topology,
network namespaces, and the commands built on them (``tenure zk``, ``tenure up``, ``tenure demo``)."""
