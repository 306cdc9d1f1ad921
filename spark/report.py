"""Plots and one HTML page, from the result tables a job wrote.

Plots are drawn from the small result tables (read back with pyarrow), never
from the events, so the driver holds kilobytes whatever the input size.
The index page is rebuilt from whatever tables and plots exist, so jobs run
one at a time add up to one report.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display, no Tk: a driver on a server must still draw
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from fcspark import read_table  # noqa: E402

__all__ = ["causal_notes", "plot_latency", "plot_presence", "plot_shares", "plot_throughput", "write_index"]

MAX_ROUTES = 12  # per-route plots; the tables keep every route
#: The application first (its shares, its share-to-share routes), then the plumbing under it.
SECTIONS = (
    ("shares", "Logged shares: updates, updates per second and value over time", "share-*.png"),
    ("routed", "Routed share to share: latency, loss and refusals per route", None),
    ("latency", "Link hops (lanes and roads): delivery latency per stream", "latency-*.png"),
    ("throughput", "Link hops: throughput per stream per minute", "throughput.png"),
    ("loss", "Link hops: loss, resends and missed segments", None),
    ("causal", "Causal delivery per topic and publisher: buffering lag, evidence and fetches", None),
    ("presence", "Presence of remote estates", "presence.png"),
    ("cast", "CAST per subscription: lag, resyncs and gaps", None),
)


def _plots(output: Path) -> Path:
    path = output / "plots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60] or "route"


def plot_latency(output: Path) -> list[str]:
    stats, hist = read_table(output, "latency"), read_table(output, "latency_hist")
    plots = _plots(output)
    for old in plots.glob("latency-*.png"):
        old.unlink()
    if stats is None or hist is None or stats.empty:
        return ["no delivered messages"]
    routes = stats.sort_values(["delivered", "route"], ascending=[False, True]).head(MAX_ROUTES)
    for i, row in enumerate(routes.itertuples(index=False)):
        h = hist[hist.route == row.route].sort_values("bin")
        fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
        ax.bar(h["from"] * 1000, h["count"], width=(h["to"] - h["from"]) * 1000, align="edge", color="#4c72b0")
        ax.set_xscale("log")
        for name, value, style in (("p50", row.p50, "-"), ("p95", row.p95, "--"), ("p99", row.p99, ":")):
            if value is not None:
                ax.axvline(value * 1000, color="#c44e52", linestyle=style, label=f"{name} {value * 1000:.3g} ms")
        ax.set_title(row.route, fontsize=9)
        ax.set_xlabel("latency (ms)")
        ax.set_ylabel("messages")
        ax.legend(fontsize=8)
        fig.savefig(plots / f"latency-{i:02d}-{_slug(row.route)}.png", dpi=90)
        plt.close(fig)
    notes = []
    if len(stats) > MAX_ROUTES:
        notes.append(f"histograms for the {MAX_ROUTES} busiest of {len(stats)} routes")
    return notes


def plot_shares(output: Path) -> list[str]:
    """One plot per logged share (the busiest :data:`MAX_ROUTES`): each numeric field's mean over
    time, with its range in each bucket shaded; and the headline of the section."""
    summary, series = read_table(output, "shares"), read_table(output, "share_series")
    plots = _plots(output)
    for old in plots.glob("share-*.png"):
        old.unlink()
    if summary is None or summary.empty:
        return ["no logged share changed (mark shares for logging in the flow: `log SHARE` in FloScript, "
                "`log:` in YAML)"]
    busiest = summary.sort_values(["updates", "estate", "house", "share"], ascending=[False, True, True, True])
    notes = [f"{len(summary)} logged share(s), {int(summary.updates.sum())} update(s)"]
    drawn = 0
    for row in busiest.itertuples(index=False):
        if drawn >= MAX_ROUTES or series is None:
            break
        mine = series[(series.estate == row.estate) & (series.house == row.house) & (series.share == row.share)]
        if mine.empty:
            continue  # no numeric field: its values are in the table
        fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
        for field in sorted(mine.field.unique()):
            points = mine[mine.field == field].sort_values("at")
            line, = ax.plot(points["at"], points["mean"], marker="o" if len(points) < 40 else None,
                            markersize=3, label=field)
            ax.fill_between(points["at"], points["min"], points["max"], alpha=0.2, color=line.get_color())
        rate = f", {row.per_second:.3g} updates/s" if pd.notna(row.per_second) else ""
        ax.set_title(f"{row.share} in {row.estate}/{row.house}: {row.updates} updates{rate}", fontsize=9)
        ax.set_xlabel("time (UTC)")
        ax.legend(fontsize=8)
        fig.autofmt_xdate()
        fig.savefig(plots / f"share-{drawn:02d}-{_slug(f'{row.estate}_{row.house}_{row.share}')}.png", dpi=90)
        plt.close(fig)
        drawn += 1
    if len(summary) > MAX_ROUTES:
        notes.append(f"plots for the {MAX_ROUTES} busiest of {len(summary)} shares")
    return notes


def plot_throughput(output: Path) -> list[str]:
    table = read_table(output, "throughput")
    path = _plots(output) / "throughput.png"
    path.unlink(missing_ok=True)
    if table is None or table.empty:
        return ["no delivered messages"]
    busiest = table.groupby("route")["messages"].sum().sort_values(ascending=False).head(MAX_ROUTES).index
    minutes = pd.date_range(table["minute"].min(), table["minute"].max(), freq="1min")  # quiet minutes show as 0
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    for route in sorted(busiest):
        r = table[table.route == route].set_index("minute")["messages"].reindex(minutes, fill_value=0)
        ax.plot(r.index, r.values, marker="o", markersize=3, label=route)
    ax.set_xlabel("minute (UTC)")
    ax.set_ylabel("messages delivered per minute")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return []


def plot_presence(output: Path) -> list[str]:
    table = read_table(output, "presence")
    path = _plots(output) / "presence.png"
    path.unlink(missing_ok=True)
    if table is None or table.empty:
        return ["no presence changes recorded"]
    table = table.sort_values(["observer", "remote", "since"])
    first = table["since"].min()
    last = max(table["since"].max(), table["until"].max()) if table["until"].notna().any() else table["since"].max()
    end = last + max((last - first) / 10, pd.Timedelta(seconds=1))  # open intervals end a little past the last change
    lanes = list(dict.fromkeys(zip(table.observer, table.remote)))
    colours: dict[str, Any] = {}
    palette = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(lanes) + 1.5))
    for y, (observer, remote) in enumerate(lanes):
        rows = table[(table.observer == observer) & (table.remote == remote)]
        for row in rows.itertuples(index=False):
            colour = colours.setdefault(row.status, palette(len(colours) % 10))
            stop = row.until if row.until is not None and row.until == row.until else end
            start_n, stop_n = matplotlib.dates.date2num(row.since), matplotlib.dates.date2num(stop)
            ax.broken_barh([(start_n, max(stop_n - start_n, 1e-6))], (y - 0.4, 0.8), color=colour)
    ax.set_yticks(range(len(lanes)), [f"{o} sees {r}" for o, r in lanes])
    ax.xaxis_date()
    ax.legend(handles=[matplotlib.patches.Patch(color=c, label=s) for s, c in colours.items()], fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return []


def causal_notes(output: Path) -> list[str]:
    """The causal section's headline: what waited longest, and what was never delivered and why."""
    table, evidence = read_table(output, "causal"), read_table(output, "causal_evidence")
    if table is None or table.empty:
        return ["no causal deliveries recorded"]
    notes = [f"{int(table.delivered.sum())} delivered, {int(table.buffered.sum())} buffered first, "
             f"{int(table.rejected.sum())} rejected, {int(table.abandoned.sum())} abandoned"]
    timed = table[table.max_lag.notna()]
    if not timed.empty:
        worst = timed.sort_values(["max_lag", "subscriber"], ascending=[False, True]).iloc[0]
        notes.append(f"longest wait {worst['max_lag']:.6g} s: topic {worst['topic']}, publisher {str(worst['publisher'])[:16]}..., "
                     f"at {worst['subscriber']} ({worst['sub']})")
    if evidence is not None and not evidence.empty:
        equivocations = evidence[evidence.kind == "equivocation"]
        if not equivocations.empty:
            who = sorted({f"{t}/{str(p)[:16]}..." for t, p in zip(equivocations.topic, equivocations.publisher)})
            notes.append(f"equivocation by {', '.join(who)}")
    return notes


def _table_html(output: Path, name: str, limit: int = 50) -> str:
    table = read_table(output, name)
    if table is None:
        return ""
    if table.empty:
        return "<p><em>empty</em></p>"
    keys = [c for c in ("estate", "house", "share", "field", "route", "observer", "relay", "remote", "minute", "since", "subscriber", "topic", "publisher", "sub")
            if c in table.columns]
    if keys:
        table = table.sort_values(keys, kind="stable")
    more = f"<p>first {limit} of {len(table)} rows</p>" if len(table) > limit else ""
    return table.head(limit).to_html(index=False, float_format=lambda v: f"{v:.6g}", border=0) + more


def write_index(output: Path, summary: dict[str, Any]) -> Path:
    """(Re)write ``output/index.html`` linking every table and plot present."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>flowcast report</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;font-size:90%}"
        "td,th{padding:2px 8px;text-align:right}tr:nth-child(even){background:#f4f4f4}img{max-width:100%}</style>",
        "</head><body><h1>flowcast report</h1>",
        f"<p>input <code>{html.escape(str(summary.get('input')))}</code>: {summary.get('events')} events from "
        f"{summary.get('files')} file(s)</p>",
    ]
    skipped = summary.get("skipped") or []
    if skipped:
        parts.append(f"<p><strong>{len(skipped)} file(s) skipped:</strong></p><ul>")
        parts += [f"<li>{html.escape(s)}</li>" for s in skipped]
        parts.append("</ul>")
    jobs = summary.get("jobs", {})
    for name, title, pattern in SECTIONS:
        if name not in jobs:
            continue
        job = jobs[name]
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts += [f"<p><em>{html.escape(n)}</em></p>" for n in job.get("notes", [])]
        for table in job.get("tables", {}):
            if not table.endswith(("_hist", "_series")):  # drawn, not listed
                parts.append(f"<h3>{html.escape(table)}</h3>{_table_html(output, table)}")
            parts.append(f"<p><a href='tables/{html.escape(table)}'>tables/{html.escape(table)}</a> (Parquet)</p>")
        if pattern:
            for png in sorted((output / "plots").glob(pattern)):
                rel = f"plots/{png.name}"
                parts.append(f"<p><a href='{html.escape(rel)}'><img src='{html.escape(rel)}' alt='{html.escape(png.stem)}'></a></p>")
    parts.append("</body></html>")
    path = output / "index.html"
    tmp = path.with_name(".index.html.inprogress")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(path)
    return path
