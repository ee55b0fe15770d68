"""The `tidemq` command: the one module above every layer (see tidemq/cli.py)."""
