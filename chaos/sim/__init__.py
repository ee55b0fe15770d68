"""The deterministic simulation (issue 26), piece by piece. So far: `etcd_model`, an
in-memory etcd of the operations the controller uses, held to real etcd by a differential
test (tests/chaos/test_etcd_model.py)."""
