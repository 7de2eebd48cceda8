"""Operator tools that work against a running deployment: ``tenure status``, ``verify``, ``groups``, ``produce``.

They talk to ZooKeeper and read the data root; none starts a replica or a ZooKeeper server.
"""
