"""A README row from a benchmark's JSON: the command and its conditions, our median figure with
its spread (and MFU), each peer's, and the ratios (median of the per-round ratios, their range, and
the same by CPU time where the JSON has it). A benchmark of several batch sizes (its row names
``batches``, as generation.py's does) gives them all in one row, a figure and a ratio per batch
size, with whether the greedy ids were equal. Nothing is typed: every number comes from the file."""

from __future__ import annotations

HEADER = "| benchmark | ours | peer | ratio | goal |\n|---|---|---|---|---|\n"


def number(x: float) -> str:
    """Three significant figures, thousands separated."""
    if x == 0:
        return "0"
    exponent = int(f"{abs(x):e}".split("e")[1])
    if exponent >= 2:
        return f"{round(x, 2 - exponent):,.0f}"
    return f"{x:,.{2 - exponent}f}"


def spread_text(s: dict) -> str:
    return f"{number(s['median'])} ({number(s['min'])}–{number(s['max'])})"


def side_text(figures: dict, figure: str, unit: str, with_mfu: bool) -> str:
    text = f"{spread_text(figures[figure])} {unit}"
    if with_mfu and "mfu" in figures:
        text += f", MFU {100 * figures['mfu']['median']:.0f} %"
    return text


def conditions(data: dict, file: str) -> str:
    s = data["settings"]
    kernels = "deterministic kernels" if s["deterministic"] else "non-deterministic kernels"
    fill = ", NaN fill on" if s["fill_uninitialized_memory"] else ""
    peak = data.get("gemm_peak_flop_per_s")
    peak_text = f", GEMM peak {peak['best'] / 1e9:.0f} GFLOP/s" if peak else ""
    return (
        f"{data['row']['title']}; {s['threads']} thread(s), {kernels}{fill}, {s['dtype']}; median of "
        f"{data['rounds']} alternating rounds; load {data['load_before'][0]} → {data['load_after'][0]}"
        f"{peak_text}; `benchmarks/results/{file}`"
    )


def batches_row(data: dict, file: str) -> str:
    """One row for every batch size: ``batch 1 / 8 / 32: a / b / c tok/s`` per side, ratios likewise."""
    r = data["row"]
    sides, ratios, batches = data["sides"], data["ratios"], r["batches"]

    def figures(side: str) -> str:
        return " / ".join(spread_text(sides[side][f"batch_{b}_{r['figure']}"]) for b in batches)

    ours = f"batch {' / '.join(map(str, batches))}: {figures(r.get('ours', 'toolbox'))} {r['unit']}"
    peers = "; ".join(f"{label} {figures(name)} {r['unit']}" for name, label in r["peers"].items())
    parts = []
    for name, label in r["peers"].items():
        wall = [ratios[f"vs_{name}_batch_{b}"] for b in batches]
        text = " / ".join(f"{x['median']:.2f}× ({x['min']:.2f}–{x['max']:.2f})" for x in wall) + f" {label}"
        cpu = [ratios.get(f"vs_{name}_batch_{b}_cpu") for b in batches]
        if all(cpu):
            text += ", by CPU time " + " / ".join(f"{x['median']:.2f}×" for x in cpu)
        parts.append(text)
    match = data.get("greedy_ids_match")
    if match is not None:
        differ = [str(b) for b in batches if not match[str(b)]]
        parts.append(
            f"**greedy ids differ at batch {'/'.join(differ)}**"
            if differ
            else "greedy ids equal at every batch"
        )
    command = f"`{data['command']}` ({conditions(data, file)})"
    return f"| {command} | {ours} | {peers} | {'; '.join(parts)} | {r['goal']} |\n"


def row(data: dict, file: str) -> str:
    r = data["row"]
    if "batches" in r:
        return batches_row(data, file)
    sides, ratios = data["sides"], data["ratios"]
    ours = side_text(sides[r.get("ours", "toolbox")], r["figure"], r["unit"], r.get("mfu", False))
    peers = "; ".join(
        f"{label} {side_text(sides[name], r['figure'], r['unit'], r.get('mfu', False))}"
        for name, label in r["peers"].items()
    )
    parts = []
    for name, label in r["peers"].items():
        wall = ratios[f"vs_{name}"]
        text = f"{wall['median']:.2f}× {label} ({wall['min']:.2f}–{wall['max']:.2f})"
        cpu = ratios.get(f"vs_{name}_cpu")
        if cpu:
            text += f", by CPU time {cpu['median']:.2f}×"
        parts.append(text)
    command = f"`{data['command']}` ({conditions(data, file)})"
    return f"| {command} | {ours} | {peers} | {'; '.join(parts)} | {r['goal']} |\n"


def table(files: dict[str, dict]) -> str:
    """The rows of every harness JSON (file name -> contents) that declares one, by file name."""
    rows = [
        row(data, name) for name, data in sorted(files.items()) if data.get("format") == 1 and "row" in data
    ]
    if not rows:
        return "No benchmark results in the harness's format yet (`benchmarks/results/*.json`).\n"
    return HEADER + "".join(rows)
