"""Benchmark harness pieces for `scripts/bench compare`: the trio floor server
(floor.py), the lean asyncio load clients (lean.py), the peers' processes (peers.py) and
the comparison run with its report (compare.py, report.py). Tools, not library code:
nothing under store/ha/node/cluster imports this package.
"""
