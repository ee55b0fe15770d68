"""Failover drills: the framework (framework.py: a scratch cluster under load, one fault, a
report of promises), the drills themselves (basic.py, promotion.py, auto.py) and their
command line (cli.py: `tidemq drill NAME`, scripts/drill)."""
