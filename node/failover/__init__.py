"""How a node changes role without forking the log: promotion, the write gate and rejoin
(promotion.py's Failover) over its state (term.py) and its questions to others (asker.py),
the decisions without I/O (epochs.py, fencing.py, election.py), the files beside the store
(role.py, truncation.py), and automatic failover on etcd (controller.py over etcd.py)."""
