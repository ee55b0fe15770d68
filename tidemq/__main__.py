"""`python -m tidemq ...` runs the `tidemq` command."""

import sys

from tidemq.cli import main

sys.exit(main())
