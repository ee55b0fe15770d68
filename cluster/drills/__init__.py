"""Failover drills: the framework (framework.py: a scratch cluster under load, one fault, a
report of promises), the drills themselves (basic.py, promotion.py, auto.py) and their
command line (cli.py: `tidemq drill NAME`, scripts/drill); and the judge the drills and the
chaos suite share (history.py: what the clients were told; checker.py: that against what
the stores hold and the consumers read), here because chaos builds on cluster, not the
other way."""
