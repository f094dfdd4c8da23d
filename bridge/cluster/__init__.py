"""Several daemons on one store: leases, forwarded commands, live events across instances
(bridge/cluster/base.py says how)."""

from bridge.cluster.base import Cluster, Command, Reply, SoloCluster

__all__ = ["Cluster", "Command", "Reply", "SoloCluster"]
