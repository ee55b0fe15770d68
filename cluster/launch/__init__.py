"""The local launcher: layouts from conf/ (layout.py), cluster.json and its lock (state.py),
node processes (processes.py), Toxiproxy routing (proxies.py), a local etcd
(etcd_server.py, launcher_etcd.py), `tidemq cluster status` (health.py) and the commands
that tie them (launcher.py)."""
