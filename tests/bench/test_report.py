"""bench/report.py on hand-made runs: medians per (system, case), figures a run did not
record stay None, and the chart draws one colour per system (no processes, no timings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import report


def _run(system: str, case: str, msgs_per_s: int, **extra: Any) -> dict[str, Any]:
    return {"system": system, "case": case, "msgs_per_s": msgs_per_s, "p50_ms": 1.0, "p99_ms": 2.0,
            "failed": 0, "errors": {}, "cpu_cores": {"master": 0.5}, "client_cpu_cores": 0.25, **extra}


def test_summarize_takes_medians_and_leaves_unrecorded_figures_none() -> None:
    raw = {"runs": [_run("floor", "1x1", 100), _run("floor", "1x1", 301), _run("floor", "1x1", 250),
                    _run("tidemq-async", "1x1", 7, server_us_per_msg=12.5),
                    _run("tidemq-async", "1x1", 9)],
           "fio": [], "catch_up": []}
    table = report.summarize(raw)["table"]
    floor, tidemq = table["floor"]["1x1"], table["tidemq-async"]["1x1"]
    assert floor["msgs_per_s"] == 250 and floor["msgs_per_s_each"] == [100, 301, 250]
    assert floor["server_us_per_msg"] is None  # no run of the floor measured it
    assert tidemq["msgs_per_s"] == 8 and tidemq["server_us_per_msg"] == 12.5  # the one run that did
    assert tidemq["cpu_cores"] == {"master": 0.5} and tidemq["runs"] == 2


def test_chart_gives_each_system_its_own_colour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes

    colours: list[tuple[float, ...]] = []
    bar = Axes.bar

    def recording_bar(self: Axes, *args: Any, **kwargs: Any) -> Any:
        colours.append(tuple(kwargs["color"]))
        return bar(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "bar", recording_bar)
    runs = [_run(system, "1x1", 1000 + i) for i, system in enumerate(report.COLUMNS)]
    summary = report.summarize({"runs": runs, "fio": [], "catch_up": []})
    png = tmp_path / "compare.png"
    assert report.chart(summary, png, "today")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(colours) == len(report.COLUMNS) == len(set(colours))


def test_the_client_library_row_sets_producer_send_beside_redis_py_and_judges_the_goal() -> None:
    runs = [_run("tidemq-async-client", "client", 4000, client_us_per_msg=90.0),
            _run("tidemq-async-client", "1x1", 5000),
            _run("redis-everysec-client", "client", 10_000, client_us_per_msg=60.0),
            _run("redis-everysec-client", "1x1", 8000)]
    raw = {"runs": runs, "fio": [], "catch_up": [], "skipped": [],
           "machine": {"cpus": 2, "load_avg_1m": 1.0, "python": "3.11"}, "settings": {"runs": 1, "seconds": 3}}
    summary = report.summarize(raw)
    goal = next(g for g in report.goals(summary) if g["goal"].startswith("client library"))
    assert goal["ratio"] == 0.4 and goal["met"] is False  # 4,000 / 10,000 < 0.6
    md = report.markdown(raw, summary, report.goals(summary), "today")
    assert "## Client library (issue 48 item 5)" in md
    assert "| client library: client CPU per send (µs) | 90.00 | 60.00 | 1.50 |" in md
    assert "| lean client, 1 × 1 (the server's own pace) | 5,000/s | 8,000/s | 0.62 |" in md
    assert "| client library ÷ lean 1 × 1 (same server) | 0.80 | 1.25 | — |" in md
    assert report.client_markdown(report.summarize({"runs": runs[:1], "fio": [], "catch_up": []}))[-7].endswith(
        "| 4,000/s | — | — |")


def test_jetstreams_goal_holds_in_every_run_not_only_for_the_medians() -> None:
    """Issue 48: SYNC_MASTER 16 x 1 >= 1.0 x JetStream R3 in every run. Medians that pass
    with one round below fail the goal; the rounds' ratios are listed."""
    runs = [_run("tidemq-syncmaster", "16x1", 9000, run=1), _run("js-r3", "16x1", 8000, run=1),
            _run("tidemq-syncmaster", "16x1", 7000, run=2), _run("js-r3", "16x1", 7500, run=2),
            _run("tidemq-syncmaster", "16x1", 9500, run=3), _run("js-r3", "16x1", 7600, run=3)]
    summary = report.summarize({"runs": runs, "fio": [], "catch_up": []})
    goal = next(g for g in report.goals(summary) if "JetStream R3" in g["goal"])
    assert goal["ratio"] > 1.0  # the medians: 9,000 / 7,600
    assert goal["ratios_each"] == [1.125, 0.933, 1.25] and goal["met"] is False
