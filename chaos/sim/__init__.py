"""The deterministic simulation (docs/simulation.md): one seed's run (run.py: the seeded
clock and scheduler around simulation.py), its cluster (cluster.py) on a simulated network
(network.py) and etcd (etcd_link.py, etcd_model.py), its workload (load.py), faults
(schedule.py, mutations.py), judgement (judge.py, verdict.py) and sweeps (sweep.py)."""
