#!/usr/bin/env python3
"""The one-screen scoreboard, docs/scoreboard/README.md, and its plot, current.svg, from the
JSON lines of one recorded invocation of scripts/bench-matrix.sh (its mem and cap files).

Usage:
  scripts/scoreboard.py [--dir DIR] [--commit C] FILE.jsonl...
      writes DIR/README.md and DIR/current.svg (DIR: docs/scoreboard); the page names its
      input files (relative to DIR) and the commit the run measured in its first line
  scripts/scoreboard.py --recheck [--dir DIR]
      regenerates both from the inputs the committed page names and exits 1, naming the
      first line that differs, when either has drifted from them

Per value size and regime, and per engine: the load's throughput, the update phases'
throughput (their operations over their time), the updates' write amplification (the
engine's bytes written over the user's), the worst space amplification at a phase's last
write and the peak resident memory. Nothing in the output depends on the time or machine
it is generated on, so a regeneration is byte for byte the committed page.
"""
import argparse
import os
import re
import sys
import textwrap

import matrix_rows

PAGE = "README.md"
PLOT = "current.svg"
HEADER = re.compile(r"^<!-- scoreboard\.py inputs: (.+); commit: (\S+) -->$")
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def is_load(phase):
    return phase.endswith(".P0") or phase.endswith(".load")


def written(r):
    """The bytes a phase wrote: the engine's own count, or for a peer, which has none, the
    bytes its process passed to write calls (`wchar`), which is what ours counts too."""
    if r["engine_bytes_written"] is not None:
        return r["engine_bytes_written"]
    return r["proc_io"]["wchar"]


def summarise(phases, engine):
    """The figures of one engine in one group, or None if it has no line there."""
    rows = [(p, by[engine]) for p, by in phases.items() if engine in by]
    if not rows:
        return None
    load = [r for p, r in rows if is_load(p)]
    updates = [r for p, r in rows if not is_load(p)]
    s = {"missing": [p for p, by in phases.items() if engine not in by],
         "last": rows[-1][0]}
    s["loaded_gib"] = load[0]["user_bytes_written"] / 2**30 if load else None
    s["load_kops"] = load[0]["ops_per_sec"] / 1e3 if load else None
    if updates:
        s["update_kops"] = sum(r["ops"] for r in updates) / sum(
            r["elapsed_s"] for r in updates) / 1e3
        s["write_amp"] = sum(written(r) for r in updates) / sum(
            r["user_bytes_written"] for r in updates)
    else:
        s["update_kops"] = s["write_amp"] = None
    amps = [r.get("space_amp_before_settle") or r["space_amp"] for _, r in rows]
    s["space_amp"] = max(a for a in amps if a is not None) if any(amps) else None
    rss = [r["peak_rss_bytes"] for _, r in rows if r.get("peak_rss_bytes")]
    s["rss_mib"] = max(rss) / 2**20 if rss else None
    return s


def num(x, fmt):
    return "-" if x is None else fmt.format(x)


def short(label):
    """`1 KiB pairs (1000 B values)` -> `1 KiB pairs`: the row label of the tables."""
    return label.split(" (")[0] if not label.startswith("Mixed") else "Mixed"


def command(groups, engines):
    values, workloads = [], []
    for phases in groups.values():
        for by in phases.values():
            for r in by.values():
                v = "mixed" if r["workload"] == "mixed" else str(int(r["value_size"]))
                if v not in values:
                    values.append(v)
                if r["workload"] != "mixed" and r["workload"] not in workloads:
                    workloads.append(r["workload"])
    regimes = []
    for regime, _ in groups:
        if regime not in regimes:
            regimes.append(regime)
    return (f'ENGINES={",".join(engines)} VALUES="{" ".join(values)}" '
            f'WORKLOADS="{" ".join(workloads) or "update"}" REGIMES="{" ".join(regimes)}" '
            "scripts/bench-matrix.sh")


def table(groups, engines, summaries, title, cell, best=None):
    out = textwrap.wrap(title, 90) + ["", "| data | " + " | ".join(engines) + " |",
           "|---|" + "---:|" * len(engines)]
    for key in groups:
        regime, label = key
        cells = []
        top = None
        if best:
            scores = [best(summaries[key, e]) for e in engines if summaries[key, e]]
            top = max((x for x in scores if x is not None), default=None)
        for e in engines:
            s = summaries[key, e]
            if s is None:
                cells.append("")
                continue
            text = cell(s, top is not None and best(s) == top and len(engines) > 1)
            if s["missing"]:
                text += f" (stopped after {s['last']})"
            cells.append(text)
        out.append(f"| {short(label)}, {regime} | " + " | ".join(cells) + " |")
    return out + [""]


def sizes_note(groups, summaries, engines):
    """A line for each group that loaded far more than the smallest: under `cap` its memory
    was a smaller share of its data than a quarter."""
    loaded = {}
    for key in groups:
        gibs = [summaries[key, e]["loaded_gib"] for e in engines
                if summaries[key, e] and summaries[key, e]["loaded_gib"]]
        if gibs:
            loaded[key] = max(gibs)
    if not loaded:
        return []
    least = min(loaded.values())
    notes = []
    for (regime, label), gib in loaded.items():
        if gib > 1.5 * least and short(label) not in [n[0] for n in notes]:
            notes.append((short(label), gib))
    return [f"- {name} loaded {gib:.1f} GiB where the others loaded {least:.1f} GiB, so "
            f"under `cap` its memory was 1/{round(4 * gib / least)} of its data, not a "
            "quarter: its rows are not comparable with the others'." for name, gib in notes]


def wrap(text):
    return textwrap.wrap(text, 90, break_on_hyphens=False) + [""]


def least_loaded(groups, summaries, engines):
    gibs = [summaries[k, e]["loaded_gib"] for k in groups for e in engines
            if summaries[k, e] and summaries[k, e]["loaded_gib"]]
    return min(gibs) if gibs else None


def page(groups, engines, summaries, inputs, commit, directory):
    files = " and ".join(f"[`{i}`]({i})" for i in inputs)
    gib = least_loaded(groups, summaries, engines)
    size = f"{gib:.0f} GiB of data per row" if gib else "The data"
    # matrix-2026-11-28-mem.jsonl -> matrix-2026-11-28.md, the same run's per-phase tables.
    tables = re.sub(r"-[a-z]+\.jsonl$", ".md", os.path.basename(inputs[0]))
    phases = (f"every phase's figures: [`{tables}`]({tables}); "
              if os.path.exists(os.path.join(directory, tables)) else "")
    lines = [f"<!-- scoreboard.py inputs: {' '.join(inputs)}; commit: {commit} -->",
             "# Scoreboard", ""]
    lines += wrap("The current figures, generated by `scripts/scoreboard.py` (do not edit "
                  "this page: the tests' `--recheck` fails when it drifts from its files) "
                  "from the JSON lines of one run of `scripts/bench-matrix.sh` (narrowed "
                  "rows may come from several invocations into one directory) at "
                  f"commit {commit}, {files}:")
    lines += ["```sh", command(groups, engines), "```", ""]
    lines += wrap(f"{size} (`--dataset-gib`), 24 B keys, Zipf(0.99) updates, each engine in "
                  "its own process, 64 MiB memtables and block cache; `mem`: the page cache "
                  "unbounded, `cap`: capped at a quarter of the requested data. Updates are "
                  "the phases after the load (P1-P3; Mixed: one). Which preset to pick: the "
                  f"[README](../../README.md)'s table; {phases}older, dated runs, with "
                  "RocksDB and fjall: [`archive.md`](archive.md).")
    lines += [f"![updates per engine: thousands of ops/s and write amplification]({PLOT})", ""]
    lines += table(groups, engines, summaries,
                   "Thousands of ops/s, load / updates (the best updates in bold):",
                   lambda s, bold: "{} / {}".format(
                       num(s["load_kops"], "{:.0f}"),
                       num(s["update_kops"], "**{:.0f}**" if bold else "{:.0f}")),
                   best=lambda s: s["update_kops"])
    lines += table(groups, engines, summaries,
                   "Write amplification of the updates / worst space amplification at a "
                   "phase's last write / peak RSS in MiB:",
                   lambda s, _: "{} / {} / {}".format(num(s["write_amp"], "{:.2f}"),
                                                  num(s["space_amp"], "{:.2f}"),
                                                  num(s["rss_mib"], "{:.0f}")))
    notes = [line for n in sizes_note(groups, summaries, engines)
             for line in textwrap.wrap(n, 90, subsequent_indent="  ")]
    peers = [e for e in engines if e.startswith(("rocksdb", "fjall"))]
    if peers:
        notes += textwrap.wrap(f"- {', '.join(peers)} count no bytes of their own: their "
                               "write amplification is the bytes their process passed to "
                               "write calls, which is what sluicedb's own count is too.",
                               90, subsequent_indent="  ")
    if any(s is None for s in summaries.values()):
        notes += ["- An empty cell: that engine did not run that row."]
    if any(s and s["missing"] for s in summaries.values()):
        notes += textwrap.wrap("- A run stopped after a phase has no line for the later "
                               "ones: under `cap` the cgroup kills a process that outgrows "
                               "its memory.", 90, subsequent_indent="  ")
    return "\n".join(lines + notes) + "\n"


def svg(groups, engines, summaries):
    """Two panels of horizontal bars, a group of bars per row of the tables: the updates'
    thousands of ops/s, and their write amplification."""
    bar, gap, label_w, panel_w, top = 12, 14, 150, 300, 46
    rows = list(groups)
    group_h = bar * len(engines) + gap
    height = top + group_h * len(rows) + 10
    width = label_w + 2 * (panel_w + 30)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, e in enumerate(engines):
        x = label_w + i * 110
        out.append(f'<rect x="{x}" y="4" width="10" height="10" fill="{COLOURS[i % 10]}"/>'
                   f'<text x="{x + 14}" y="13">{e}</text>')
    panels = [("updates, thousands of ops/s", "update_kops", "{:.0f}"),
              ("write amplification of the updates", "write_amp", "{:.2f}")]
    for p, (title, field, fmt) in enumerate(panels):
        x0 = label_w + p * (panel_w + 30)
        values = [s[field] for s in summaries.values() if s and s[field] is not None]
        scale = (panel_w - 40) / max(values) if values else 1
        out.append(f'<text x="{x0}" y="{top - 12}" font-weight="bold">{title}</text>')
        out.append(f'<line x1="{x0}" y1="{top - 4}" x2="{x0}" y2="{height - 10}" '
                   'stroke="black"/>')
        for g, key in enumerate(rows):
            y = top + g * group_h
            if p == 0:
                out.append(f'<text x="{label_w - 6}" y="{y + group_h / 2:.0f}" '
                           f'text-anchor="end">{short(key[1])}, {key[0]}</text>')
            for i, e in enumerate(engines):
                s = summaries[key, e]
                v = s[field] if s else None
                if v is None:
                    continue
                w = v * scale
                yb = y + i * bar
                out.append(f'<rect class="bar" x="{x0}" y="{yb}" width="{w:.1f}" '
                           f'height="{bar - 2}" fill="{COLOURS[i % 10]}">'
                           f'<title>{e}: {fmt.format(v)}</title></rect>'
                           f'<text x="{x0 + w + 3:.1f}" y="{yb + bar - 3}">'
                           f'{fmt.format(v)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def generate(directory, inputs, commit):
    """(page, plot) for the input files named relative to `directory`."""
    groups, engines = matrix_rows.read([os.path.join(directory, i) for i in inputs])
    summaries = {(k, e): summarise(phases, e) for k, phases in groups.items()
                 for e in engines}
    return (page(groups, engines, summaries, inputs, commit, directory),
            svg(groups, engines, summaries))


def recheck(directory):
    path = os.path.join(directory, PAGE)
    with open(path) as f:
        first = f.readline().rstrip("\n")
    m = HEADER.match(first)
    if not m:
        raise SystemExit(f"{path}: line 1 names no inputs (expected `<!-- scoreboard.py "
                         "inputs: FILE...; commit: C -->`)")
    page_text, plot = generate(directory, m.group(1).split(), m.group(2))
    for name, want in ((PAGE, page_text), (PLOT, plot)):
        with open(os.path.join(directory, name)) as f:
            have = f.read()
        if have != want:
            have_l, want_l = have.split("\n"), want.split("\n")
            n = next((i for i, (a, b) in enumerate(zip(have_l, want_l)) if a != b),
                     min(len(have_l), len(want_l)))
            print(f"{os.path.join(directory, name)}:{n + 1}: drifted from "
                  f"{m.group(1)}; regenerate it with scripts/scoreboard.py\n"
                  f"  committed: {have_l[n] if n < len(have_l) else '(end of file)'}\n"
                  f"  generated: {want_l[n] if n < len(want_l) else '(end of file)'}",
                  file=sys.stderr)
            return 1
    print(f"{path} and {PLOT} match {m.group(1)}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.path.normpath(
        os.path.join(os.path.dirname(__file__), "..", "docs", "scoreboard")))
    ap.add_argument("--commit", default="unknown", help="the commit the run measured")
    ap.add_argument("--recheck", action="store_true")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.recheck:
        if a.files:
            ap.error("--recheck takes its inputs from the page")
        return recheck(a.dir)
    if not a.files:
        ap.error("name the JSON lines files of one invocation")
    inputs = [os.path.relpath(f, a.dir) for f in a.files]
    page_text, plot = generate(a.dir, inputs, a.commit)
    for name, text in ((PAGE, page_text), (PLOT, plot)):
        with open(os.path.join(a.dir, name), "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
