"""The console's front-end packages: fetched from the npm registry at install time into a
git-ignored directory beside this module, then served by the console itself (never a CDN).

`tidemq console --install-assets` (and scripts/run, scripts/test when they are missing)
runs `npm install` of the pinned versions below into ASSETS_DIR/npm and copies the few
files the pages load into ASSETS_DIR/vendor.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ASSETS_DIR = Path(__file__).parent / "assets"
VENDOR_DIR = ASSETS_DIR / "vendor"

PACKAGES = {"htmx.org": "2.0.4", "uplot": "1.6.31"}
"""npm package → pinned version (a version change is a reviewed change)."""

FILES = {
    "htmx.min.js": "htmx.org/dist/htmx.min.js",
    "uPlot.iife.min.js": "uplot/dist/uPlot.iife.min.js",
    "uPlot.min.css": "uplot/dist/uPlot.min.css",
}
"""What the pages load (vendor/<name>) ← where it is in node_modules."""


class AssetsError(RuntimeError):
    """The front-end packages are missing or could not be fetched."""


def missing() -> list[str]:
    """The vendor files not installed yet (empty: the console can serve its pages)."""
    return [name for name in FILES if not (VENDOR_DIR / name).is_file()]


def install(*, npm: str = "npm", timeout_s: float = 300.0) -> list[Path]:
    """Fetch PACKAGES with npm (no install scripts run) and copy FILES into VENDOR_DIR;
    returns the files written. AssetsError says what failed (no npm, the registry)."""
    if shutil.which(npm) is None:
        raise AssetsError(f"{npm} is not installed; the console's front-end packages come from the npm "
                          "registry (apt-get install npm)")
    prefix = ASSETS_DIR / "npm"
    prefix.mkdir(parents=True, exist_ok=True)
    specs = [f"{name}@{version}" for name, version in PACKAGES.items()]
    try:
        done = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                               "--ignore-scripts", "--no-save", *specs],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise AssetsError(f"npm install {' '.join(specs)} did not finish in {timeout_s:g} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise AssetsError(f"npm install {' '.join(specs)} failed: {' / '.join(tail)}")
    VENDOR_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source in FILES.items():
        src = prefix / "node_modules" / source
        if not src.is_file():
            raise AssetsError(f"npm installed no {source}")
        shutil.copyfile(src, VENDOR_DIR / name)
        written.append(VENDOR_DIR / name)
    return written
