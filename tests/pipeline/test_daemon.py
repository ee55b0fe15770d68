"""pipeline.daemon drops from its path the zips Spark puts first on a worker's PYTHONPATH when
they lie inside the installed pyspark package (the same sources, but compiled again on every
import from a zip), and keeps any other zip. A real `python -m pipeline.daemon`'s imports,
without Spark: the Spark tests run every worker through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark

from tests.node.nodeproc import REPO

LIB = Path(pyspark.__file__).parent / "python" / "lib"
_PROBE = ("import json, sys, pipeline.daemon; "
          "print(json.dumps({'path': [p for p in sys.path if p.endswith('.zip')], "
          "'pyspark': sys.modules['pyspark'].__file__}))")


def _daemon_path(zips: list[str]) -> dict:
    """Which of `zips` (first on PYTHONPATH, as Spark puts them) the daemon's path keeps, and
    where its pyspark came from."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*zips, str(REPO)])}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    return {**seen, "path": [p for p in seen["path"] if p in zips]}


def test_the_installed_pysparks_own_zips_are_dropped_and_pyspark_loads_from_the_package() -> None:
    zips = sorted(str(p) for p in LIB.glob("*.zip"))
    assert any(Path(z).name == "pyspark.zip" for z in zips) and any(Path(z).name.startswith("py4j") for z in zips)
    seen = _daemon_path(zips)
    assert seen["path"] == []
    assert seen["pyspark"] == pyspark.__file__, "PySpark from the installed package, not from the zip"


def test_a_zip_from_elsewhere_stays(tmp_path: Path) -> None:
    other = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("unrelated.py", "")
    seen = _daemon_path([str(other), str(LIB / "pyspark.zip")])
    assert seen["path"] == [str(other)]
