"""How a node changes role without forking the log: promotion, epochs and rejoin
(promotion.py), the fencing watch's decisions without I/O (fencing.py), and automatic
failover on etcd (controller.py over the small etcd client in etcd.py)."""
