"""What `scripts/bench compare` writes: medians, the goals of issue 23, Markdown, a chart.

`summarize` turns the raw runs into medians per (system, case); `goals` measures each goal
as a ratio of medians of the same run; `markdown` renders both; `chart` draws the
throughput table as grouped bars (PNG, needs matplotlib: the `bench` extra).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .compare import CASES, CLIENT_CASES, GROUPS, MODES, REMOTING_CASES, RMQ_MODES

__all__ = ["chart", "client_markdown", "goals", "markdown", "remoting_markdown", "summarize"]

COLUMNS = ("floor", *MODES, *GROUPS, "redis-everysec", "redis-always", "redis-everysec-wait", "redis-always-wait",
           "js-r1", "js-r3")
TITLES = {
    "floor": "trio floor",
    "tidemq-async": "tidemq async",
    "tidemq-syncflush": "tidemq SYNC_FLUSH",
    "tidemq-syncmaster": "tidemq SYNC_MASTER",
    "tidemq-both": "tidemq both",
    "tidemq-secure": "tidemq async, TLS + login",
    "tidemq-async-metrics": "tidemq async, /metrics scraped 1/s",
    "tidemq-syncflush-thread": "tidemq SYNC_FLUSH, fdatasync in a thread",
    "tidemq-both-thread": "tidemq both, fdatasync in a thread",
    "tidemq-async-2groups": "tidemq async, 2 groups on the host",
    "tidemq-syncflush-2groups": "tidemq SYNC_FLUSH, 2 groups on the host",
    "redis-everysec": "Redis everysec",
    "redis-always": "Redis always",
    "redis-everysec-wait": "Redis everysec + WAIT",
    "redis-always-wait": "Redis always + WAIT",
    "js-r1": "JetStream R1",
    "js-r3": "JetStream R3",
    "tidemq-async-client": "tidemq async (client library)",
    "redis-everysec-client": "Redis everysec (redis-py)",
}


def _median(values: list[float | None]) -> float | None:
    """The median of the values present (rounded), None when there are none."""
    present = [v for v in values if v is not None]
    return _median_of(present) if present else None


def _median_of(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Medians over the rounds: msgs/s, p50/p99 ms, server CPU cores, master RSS."""
    cells: dict[str, dict[str, Any]] = {}
    for r in raw["runs"]:
        cells.setdefault(r["system"], {}).setdefault(r["case"], []).append(r)
    table: dict[str, dict[str, Any]] = {}
    for system, cases in cells.items():
        for case, runs in cases.items():
            cpu_names = runs[0]["cpu_cores"].keys()
            table.setdefault(system, {})[case] = {
                "runs": len(runs),
                "msgs_per_s": round(_median_of([r["msgs_per_s"] for r in runs])),  # every run has it
                "msgs_per_s_each": [r["msgs_per_s"] for r in runs],
                "p50_ms": _median([r["p50_ms"] for r in runs]),
                "p99_ms": _median([r["p99_ms"] for r in runs]),
                "failed": sum(r["failed"] for r in runs),
                "errors": {k: v for r in runs for k, v in r["errors"].items()},
                "cpu_cores": {n: _median([r["cpu_cores"][n] for r in runs]) for n in cpu_names},
                "client_cpu_cores": _median([r["client_cpu_cores"] for r in runs]),
                "server_us_per_msg": _median([r.get("server_us_per_msg") for r in runs]),
                "client_us_per_msg": _median([r.get("client_us_per_msg") for r in runs]),
            }
    rss, anon = {}, {}
    for system in MODES:
        samples = [r["master_rss_mb"] for r in raw["runs"] if r["system"] == system and "master_rss_mb" in r]
        if samples:
            rss[system] = round(max(s["max"] for s in samples), 1)
            anon[system] = round(max(s["anon_max"] for s in samples), 1)
    if "soak" in raw:  # the soak loads the async master: its samples count too
        rss["tidemq-async"] = max(rss.get("tidemq-async", 0.0), raw["soak"]["rss_mb_max"])
        anon["tidemq-async"] = max(anon.get("tidemq-async", 0.0), raw["soak"]["anon_mb_max"])
    fio = {
        "sequential_mb_per_s": _median([f["sequential"]["mb_per_s"] for f in raw["fio"]]),
        "fdatasync_p99_ms": _median([f["fdatasync_4k"]["fdatasync_p99_ms"] for f in raw["fio"]]),
        "fdatasync_iops": _median([f["fdatasync_4k"]["iops"] for f in raw["fio"]]),
    } if raw["fio"] else {}
    catch_up = {"mb_per_s": _median([c["mb_per_s"] for c in raw["catch_up"]]),
                "mb": raw["catch_up"][0]["mb"]} if raw["catch_up"] else {}
    return {"table": table, "master_rss_mb_max": rss, "master_anon_mb_max": anon, "fio": fio,
            "catch_up": catch_up, "soak": raw.get("soak")}


def _get(summary: dict[str, Any], system: str, case: str, field: str = "msgs_per_s") -> float | None:
    return summary["table"].get(system, {}).get(case, {}).get(field)


def _ratio_goal(summary: dict[str, Any], name: str, system: str, case: str,
                peer: str, peer_case: str, factor: float) -> dict[str, Any]:
    value, ref = _get(summary, system, case), _get(summary, peer, peer_case)
    goal = {"goal": name, "measured": value, "reference": ref, "factor": factor,
            "against": f"{TITLES[peer]} {peer_case}"}
    if value is None or not ref:
        return goal | {"ratio": None, "met": None}
    return goal | {"ratio": round(value / ref, 3), "met": value >= factor * ref}


def _every_run_goal(summary: dict[str, Any], name: str, system: str, case: str,
                    peer: str, factor: float) -> dict[str, Any]:
    """A ratio goal that must hold in every round, not only for the medians: the rounds
    interleave the systems, so the i-th run of each is from the same round."""
    goal = _ratio_goal(summary, name, system, case, peer, case, factor)
    mine = summary["table"].get(system, {}).get(case, {}).get("msgs_per_s_each") or []
    theirs = summary["table"].get(peer, {}).get(case, {}).get("msgs_per_s_each") or []
    if goal["met"] is None or len(mine) != len(theirs):
        return goal
    each = [round(a / b, 3) for a, b in zip(mine, theirs, strict=True) if b]
    return goal | {"ratios_each": each, "met": len(each) == len(mine) and all(r >= factor for r in each)}


def goals(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals of issues 23 and 48, each measured against the same run's figures (issue
    48 set SYNC_MASTER's against Redis + WAIT at 0.4, JetStream R3's in every run, and the
    batch case's at the 0.78 reached since)."""
    g = [
        _ratio_goal(summary, "async, 16 x 1 >= 0.5 x trio floor", "tidemq-async", "16x1", "floor", "16x1", 0.5),
        _ratio_goal(summary, "async, 1 x 64 >= 0.5 x trio floor", "tidemq-async", "1x64", "floor", "1x64", 0.5),
        _ratio_goal(summary, "async, 16 x send_batch 32 >= 0.78 x Redis everysec pipelined 64",
                    "tidemq-async", "16xB", "redis-everysec", "16xB", 0.78),
        _ratio_goal(summary, "SYNC_FLUSH, 16 x 1 >= 0.5 x Redis always", "tidemq-syncflush", "16x1",
                    "redis-always", "16x1", 0.5),
        _ratio_goal(summary, "SYNC_MASTER, 16 x 1 >= 0.4 x Redis + replica + WAIT (everysec)",
                    "tidemq-syncmaster", "16x1", "redis-everysec-wait", "16x1", 0.4),
        _every_run_goal(summary, "SYNC_MASTER, 16 x 1 >= 1.0 x JetStream R3, in every run", "tidemq-syncmaster",
                        "16x1", "js-r3", 1.0),
        _ratio_goal(summary, "both, 16 x 1 >= 1.0 x Redis always + WAIT", "tidemq-both", "16x1",
                    "redis-always-wait", "16x1", 1.0),
        _ratio_goal(summary, "client library: sequential Producer.send >= 0.6 x redis-py sequential XADD",
                    "tidemq-async-client", "client", "redis-everysec-client", "client", 0.6),
    ]
    floor_p99 = _get(summary, "floor", "1x1", "p99_ms")
    round_trip = _get(summary, "floor", "1x1", "p50_ms")
    fsync = summary["fio"].get("fdatasync_p99_ms")
    for mode, (flush, role) in MODES.items():
        p99 = _get(summary, mode, "1x1", "p99_ms")
        extra: float | None = 0.0
        if flush == "SYNC_FLUSH":
            extra = fsync if fsync is not None else None
        if role == "SYNC_MASTER" and extra is not None:
            extra = extra + round_trip if round_trip is not None else None
        bound = 2 * floor_p99 + extra if floor_p99 is not None and extra is not None else None
        g.append({"goal": f"{TITLES[mode]}, 1 x 1 p99 <= 2 x floor p99 + the mode's fdatasync / round trip",
                  "measured": p99, "reference": bound, "against": "bound (ms)",
                  "ratio": round(p99 / bound, 3) if p99 is not None and bound else None,
                  "met": (p99 <= bound) if p99 is not None and bound is not None else None})
    cu, seq = summary["catch_up"].get("mb_per_s"), summary["fio"].get("sequential_mb_per_s")
    g.append({"goal": "catch-up of a new slave >= 0.5 x fio buffered sequential write", "measured": cu,
              "reference": seq, "against": "fio MB/s", "factor": 0.5,
              "ratio": round(cu / seq, 3) if cu and seq else None,
              "met": (cu >= 0.5 * seq) if cu and seq else None})
    rss = summary["master_rss_mb_max"]
    if rss:
        top = max(rss.values())
        g.append({"goal": "master RSS < 300 MB at steady load, 1 GiB segments", "measured": top,
                  "reference": 300, "against": "MB", "ratio": round(top / 300, 3), "met": top < 300})
    if summary.get("soak"):
        s = summary["soak"]
        g.append({"goal": f"master RSS does not grow over a {s['minutes']:g}-minute run", "measured": s["rss_mb_late"],
                  "reference": s["rss_mb_early"], "against": "RSS early in the run (MB)",
                  "ratio": round(s["rss_mb_late"] / s["rss_mb_early"], 3), "met": not s["grows"]})
    return g


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "—"
    if unit == "/s":
        return f"{v:,.0f}/s"
    return f"{v:,.0f}{unit}" if abs(v) >= 100 else f"{v:,.2f}{unit}"


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def markdown(raw: dict[str, Any], summary: dict[str, Any], goal_rows: list[dict[str, Any]], when: str) -> str:
    cols = [c for c in COLUMNS if c in summary["table"]]
    m = raw["machine"]
    lines = [
        f"# scripts/bench compare — {when}",
        "",
        f"{m['cpus']} CPUs, load average {m['load_avg_1m']} at the end, Python {m['python']}; "
        f"1 KiB bodies, lean asyncio client; median of {raw['settings']['runs']} interleaved runs of "
        f"{raw['settings']['seconds']:g} s each.",
        "",
        "## Throughput (msgs/s)",
        "",
        "| case | " + " | ".join(TITLES[c] for c in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for key, case in CASES.items():
        cells = [_fmt(_get(summary, c, key), "/s") for c in cols]
        if any(x != "—" for x in cells):
            lines.append(f"| {case.title} | " + " | ".join(cells) + " |")
    lines.append("| p99 latency, 1 × 1 | " + " | ".join(_fmt(_get(summary, c, "1x1", "p99_ms"), " ms") for c in cols) + " |")
    lines.append("| p99 latency, 16 × 1 | " + " | ".join(_fmt(_get(summary, c, "16x1", "p99_ms"), " ms") for c in cols) + " |")
    if "floor" in summary["table"]:
        lines += ["", "## Ratio to the trio floor (same case)", "",
                  "| case | " + " | ".join(TITLES[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
        for key, case in CASES.items():
            ref = _get(summary, "floor", key)
            if not ref:
                continue
            cells = [f"{v / ref:.2f}" if (v := _get(summary, c, key)) is not None else "—" for c in cols]
            lines.append(f"| {case.title} | " + " | ".join(cells) + " |")
    peer_cols = [c for c in cols if c.startswith(("redis-", "js-"))]
    rows = []
    for mode in (c for c in cols if c in MODES):
        for key, case in CASES.items():
            value = _get(summary, mode, key)
            cells = [f"{value / ref:.2f}" if value is not None and (ref := _get(summary, p, key)) else "—"
                     for p in peer_cols]
            if any(x != "—" for x in cells):
                rows.append(f"| {TITLES[mode]}, {case.title} | " + " | ".join(cells) + " |")
    if rows:
        lines += ["", "## tidemq ÷ each peer (same case)", "",
                  "| tidemq mode, case | " + " | ".join(TITLES[c] for c in peer_cols) + " |",
                  "|---|" + "---|" * len(peer_cols), *rows]
    lines += ["", "## Serving process CPU per message (µs; the tidemq master, the floor, Redis's master, "
              "JetStream's first server)", "",
              "| case | " + " | ".join(TITLES[c] for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for key, case in CASES.items():
        cells = [_fmt(_get(summary, c, key, "server_us_per_msg")) for c in cols]
        if any(x != "—" for x in cells):
            lines.append(f"| {case.title} | " + " | ".join(cells) + " |")
    lines += ["", "## Goals (issues 23 and 48)", "", "| goal | measured | against | ratio | verdict |",
              "|---|---|---|---|---|"]
    for g in goal_rows:
        measured = g["measured"] if isinstance(g["measured"], str) else _fmt(g["measured"])
        each = f" (runs: {', '.join(_fmt(r) for r in g['ratios_each'])})" if g.get("ratios_each") else ""
        lines.append(f"| {g['goal']} | {measured} | {g['against']}: {_fmt(g['reference'])} | "
                     f"{_fmt(g['ratio'])}{each} | {_verdict(g['met'])} |")
    lines += ["", "## Server CPU (cores, median) per case", "", "| system | case | cores |", "|---|---|---|"]
    for c in cols:
        for key, cell in summary["table"][c].items():
            cores = ", ".join(f"{n} {v:.2f}" for n, v in cell["cpu_cores"].items() if v is not None)
            lines.append(f"| {TITLES[c]} | {key} | {cores}; client {cell['client_cpu_cores']} |")
    extra = []
    if summary["fio"]:
        f = summary["fio"]
        extra.append(f"fio: buffered sequential write {f['sequential_mb_per_s']} MB/s; 4 KiB + fdatasync "
                     f"{f['fdatasync_iops']} IOPS, fdatasync p99 {f['fdatasync_p99_ms']} ms.")
    if summary["catch_up"]:
        extra.append(f"Catch-up of a new slave: {summary['catch_up']['mb_per_s']} MB/s over "
                     f"{summary['catch_up']['mb']} MB of 1 KiB records.")
    if summary["master_rss_mb_max"]:
        extra.append("Master RSS max, MB (of it not file-backed): " + ", ".join(
            f"{TITLES[k]} {v} ({summary['master_anon_mb_max'][k]})" for k, v in summary["master_rss_mb_max"].items())
            + ". Resident pages of the mapped 1 GiB segments count in RSS.")
    if "soak" in raw:
        s = raw["soak"]
        extra.append(f"Soak {s['minutes']:g} min: RSS {s['rss_mb_early']} → {s['rss_mb_late']} MB "
                     f"(max {s['rss_mb_max']}): {'grows' if s['grows'] else 'does not grow'}.")
    failed = {f"{TITLES[c]} {k}": cell["failed"] for c in cols for k, cell in summary["table"][c].items()
              if cell["failed"]}
    if failed:
        extra.append("Failed requests: " + ", ".join(f"{k} {v}" for k, v in failed.items()) + ".")
    if raw["skipped"]:
        extra.append("Skipped: " + "; ".join(raw["skipped"]) + ".")
    if extra:
        lines += ["", "## Notes", ""] + [f"- {e}" for e in extra]
    lines += remoting_markdown(summary)
    lines += client_markdown(summary)
    return "\n".join(lines) + "\n"


def remoting_markdown(summary: dict[str, Any]) -> list[str]:
    """The `*-rmq` systems: each CBOR case beside its remoting twin against the same node
    (msgs/s, p50/p99, the master's CPU per message and remoting ÷ CBOR of it), then the C++
    client's own send_sync loop."""
    lines: list[str] = []
    for system in (s for s in RMQ_MODES if s in summary["table"]):
        lines += ["", f"## RocketMQ remoting: {system} (one node, CBOR and remoting interleaved)", "",
                  "| case | CBOR msgs/s | remoting msgs/s | CBOR p50 / p99 ms | remoting p50 / p99 ms | "
                  "CBOR µs/msg | remoting µs/msg | remoting ÷ CBOR µs/msg |", "|---|---|---|---|---|---|---|---|"]
        twins = [(key, f"rmq-{key}", case.title) for key, case in CASES.items()]
        twins.append(("1x64", "rmq-1x64-uniq", REMOTING_CASES["rmq-1x64-uniq"].title + " (beside CBOR 1 × 64)"))
        for key, twin, title in twins:
            if twin not in REMOTING_CASES or _get(summary, system, key) is None or _get(summary, system, twin) is None:
                continue
            cbor_us, rmq_us = (_get(summary, system, k, "server_us_per_msg") for k in (key, twin))
            ratio = f"{rmq_us / cbor_us:.2f}" if cbor_us and rmq_us else "—"
            lines.append(f"| {title} | {_fmt(_get(summary, system, key))} | {_fmt(_get(summary, system, twin))} | "
                         f"{_fmt(_get(summary, system, key, 'p50_ms'))} / {_fmt(_get(summary, system, key, 'p99_ms'))} | "
                         f"{_fmt(_get(summary, system, twin, 'p50_ms'))} / {_fmt(_get(summary, system, twin, 'p99_ms'))} | "
                         f"{_fmt(cbor_us)} | {_fmt(rmq_us)} | {ratio} |")
        for key, case in REMOTING_CASES.items():
            if case.kind == "cpp" and _get(summary, system, key) is not None:
                lines.append(f"| {case.title} | — | {_fmt(_get(summary, system, key))} | — | "
                             f"{_fmt(_get(summary, system, key, 'p50_ms'))} / {_fmt(_get(summary, system, key, 'p99_ms'))} "
                             f"| — | {_fmt(_get(summary, system, key, 'server_us_per_msg'))} | — |")
    return lines


def client_markdown(summary: dict[str, Any]) -> list[str]:
    """The `*-client` systems: each server driven by its own client library, one send after
    another, beside the lean client's 1 × 1 against the same server (the most a client could
    get from it), with the client process's CPU per send (bench/client_load.py)."""
    tidemq, redis = "tidemq-async-client", "redis-everysec-client"
    if tidemq not in summary["table"] and redis not in summary["table"]:
        return []

    def ratio(key: str, field: str) -> str:
        value, ref = _get(summary, tidemq, key, field), _get(summary, redis, key, field)
        return f"{value / ref:.2f}" if value is not None and ref else "—"

    def row(title: str, key: str, field: str, unit: str = "") -> str:
        return (f"| {title} | {_fmt(_get(summary, tidemq, key, field), unit)} | "
                f"{_fmt(_get(summary, redis, key, field), unit)} | {ratio(key, field)} |")

    def share(system: str) -> str:  # what the client library gets of the server's own pace
        value, pace = _get(summary, system, "client"), _get(summary, system, "1x1")
        return f"{value / pace:.2f}" if value is not None and pace else "—"

    return ["", "## Client library (issue 48 item 5): sequential sends, one server each", "",
            f"| | {TITLES[tidemq]} | {TITLES[redis]} | tidemq ÷ Redis |", "|---|---|---|---|",
            row(CLIENT_CASES["client"].title, "client", "msgs_per_s", "/s"),
            row("lean client, 1 × 1 (the server's own pace)", "1x1", "msgs_per_s", "/s"),
            f"| client library ÷ lean 1 × 1 (same server) | {share(tidemq)} | {share(redis)} | — |",
            row("client library: client CPU per send (µs)", "client", "client_us_per_msg"),
            row("client library: p50 (ms)", "client", "p50_ms"),
            row("client library: p99 (ms)", "client", "p99_ms"),
            row("client library: server CPU per message (µs)", "client", "server_us_per_msg")]


def chart(summary: dict[str, Any], path: Path, when: str) -> bool:
    """Grouped bars, one group per case, log scale; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    cols = [c for c in COLUMNS if c in summary["table"]]
    cases = [k for k in CASES if any(_get(summary, c, k) for c in cols)]
    fig, ax = plt.subplots(figsize=(12, 5.5))
    width = 0.8 / max(1, len(cols))
    colors = plt.get_cmap("tab20")  # 11 systems: tab10 would repeat a colour; colors(k) is its k-th
    for i, c in enumerate(cols):
        xs = [j + i * width for j in range(len(cases))]
        ax.bar(xs, [_get(summary, c, k) or 0 for k in cases], width, label=TITLES[c],
               color=colors((2 * i) % 20 if i < 10 else 2 * (i - 10) + 1))
    ax.set_xticks([j + width * (len(cols) - 1) / 2 for j in range(len(cases))])
    ax.set_xticklabels([CASES[k].short for k in cases], fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("msgs/s (log)")
    ax.set_title(f"scripts/bench compare, 1 KiB messages — {when}")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
