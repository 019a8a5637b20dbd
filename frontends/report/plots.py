"""Figures of `mosaic report`, drawn with matplotlib (docs/report.md).

Embedded in the mosaic binary at build time and run as
    python3 plots.py DATA.json OUTDIR
DATA.json: {"bench": [doc, ...], "train": [doc, ...], "sweep": [doc, ...], "generate": [doc, ...]} with each doc as
`--json` writes it (plus "_name", how the report names it). Writes one SVG per figure into
OUTDIR and OUTDIR/figures.json: [{"file", "title", "caption"}, ...] in page order, and
OUTDIR/skipped.json: a line per figure a document's missing or wrongly typed field cost.
Exit 2 with a one-line message on stderr when matplotlib is missing.
"""
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:
    sys.stderr.write("matplotlib is not available to %s (%s): install python3-matplotlib\n" % (sys.executable, e))
    sys.exit(2)

TOP_NODES = 9  # stacked bars: the slowest nodes by name, the rest as "other"
CONTENDED = 0.10  # a run whose other processes took more of the machine is marked (kPeaksContended)
SPREAD = 20.0  # stacked bars: backends whose totals differ more than this get a panel each


class Palette:
    """One colour per node and per series across every figure of the page: the same node (or
    backend) is the same colour in the per-layer bars of every run; colours are never reused
    (20 distinct ones, then dashed and dotted lines and hatches on the same colours)."""

    def __init__(self):
        self.keys = {}

    def index(self, key):
        return self.keys.setdefault(key, len(self.keys))

    def color(self, key):
        return plt.get_cmap("tab20")(self.index(key) % 20)

    def linestyle(self, key):
        return ["-", "--", ":", "-."][(self.index(key) // 20) % 4]

    def hatch(self, key):
        return ["", "//", "..", "xx"][(self.index(key) // 20) % 4]


PALETTE = Palette()


def contended(run):
    share = (run.get("summary") or {}).get("others_cpu")
    return share is not None and share > CONTENDED


def run_label(run):
    """A backend's label, marked when other processes used the machine while it was measured."""
    return run["label"] + (" (CONTENDED)" if contended(run) else "")


class Figures:
    def __init__(self, out):
        self.out, self.items = out, []

    def save(self, fig, title, caption):
        name = "fig%02d.svg" % (len(self.items) + 1)
        fig.savefig(os.path.join(self.out, name), format="svg", bbox_inches="tight")
        plt.close(fig)
        self.items.append({"file": name, "title": title, "caption": caption})


def label_of(doc):
    return "%s, batch %s, %s" % (doc.get("model"), doc.get("batch"), doc.get("mode"))


def stacked_layers(figs, doc):
    """Per-layer time per backend as stacked bars; forward, and backward in training."""
    runs = doc.get("runs", [])
    training = doc.get("mode") == "training"
    panels = [("median_us", "forward")] + ([("backward_median_us", "backward")] if training else [])
    # Backends that differ by orders of magnitude (naive next to onednn) flatten each other on
    # one linear axis: then every backend gets a panel (a row) of its own, with its own scale.
    totals = [sum(n.get("median_us") or 0 for n in r.get("nodes", [])) for r in runs]
    positive = [t for t in totals if t > 0]
    split = len(runs) > 1 and positive and max(positive) / min(positive) > SPREAD
    groups = [[r] for r in runs] if split else [runs]
    fig, axes = plt.subplots(len(groups), len(panels), figsize=(6.5 * len(panels), 4.2 if not split else 2.6 * len(groups)),
                             squeeze=False)
    for row, group in enumerate(groups):
        stacked_panels(axes[row], panels, group, row == 0)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    marked = [run_label(r) for r in runs if contended(r)]
    figs.save(fig, "Per-layer time per backend: " + label_of(doc),
              "Median kernel time of each node, stacked per backend (the %d slowest nodes by name, the rest as 'other'; "
              "a node keeps its colour in every figure)%s%s. Source: %s." % (
                  TOP_NODES, "; one panel per backend, each on its own scale, since their totals differ more than %gx"
                  % SPREAD if split else "",
                  "; CONTENDED: other processes used the machine while %s was measured" % ", ".join(marked) if marked else "",
                  doc["_name"]))


def stacked_panels(axes_row, panels, runs, titled):
    for ax, (key, what) in zip(axes_row, panels):
        total = {}
        for r in runs:
            for n in r.get("nodes", []):
                if n.get(key) is not None:
                    total[n["name"]] = total.get(n["name"], 0) + n[key]
        top = sorted(total, key=total.get, reverse=True)[:TOP_NODES]
        labels = [run_label(r) for r in runs]
        bottom = [0.0] * len(runs)
        for name in top + ["other"]:
            heights = []
            for r in runs:
                vals = {n["name"]: n.get(key) or 0 for n in r.get("nodes", [])}
                heights.append((sum(v for k, v in vals.items() if k not in top) if name == "other" else vals.get(name, 0)) / 1e3)
            color = "#bbbbbb" if name == "other" else PALETTE.color("node:" + name)
            hatch = "" if name == "other" else PALETTE.hatch("node:" + name)
            ax.bar(labels, heights, bottom=bottom, label=name, color=color, hatch=hatch,
                   edgecolor=["red" if contended(r) else "none" for r in runs])
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.set_ylabel("median ms per iteration")
        if titled:
            ax.set_title("%s per node" % what)
        ax.grid(axis="y", alpha=0.3)


def roofline(figs, doc):
    peaks = doc.get("peaks")
    if not peaks:
        return
    peak, bw = peaks["sgemm_gflops"], peaks["bandwidth_gbs"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    xs = []
    for i, r in enumerate(doc.get("runs", [])):
        pts = [(n["arithmetic_intensity"], n["gflops"]) for n in r.get("nodes", [])
               if n.get("arithmetic_intensity") and n.get("gflops")]
        if pts:
            xs += [p[0] for p in pts]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=run_label(r), s=18,
                       color=PALETTE.color("series:" + r["label"]), marker="x" if contended(r) else "o")
    if not xs:
        plt.close(fig)
        return
    lo, hi = min(xs + [peak / bw]) / 2, max(xs + [peak / bw]) * 2
    grid = [lo * (hi / lo) ** (k / 100) for k in range(101)]
    ax.plot(grid, [min(peak, x * bw) for x in grid], color="black", lw=1.2, label="roof: min(sgemm peak, AI x bandwidth)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("GFLOP/s")
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=7)
    figs.save(fig, "Roofline: " + label_of(doc),
              "Each node's achieved GFLOP/s against its arithmetic intensity; the roof is the machine's measured sgemm "
              "peak (%.0f GFLOP/s) and memory bandwidth (%.1f GB/s). A point above the roof has its operands in cache "
              "(the slope is DRAM bandwidth) or runs an algorithm with fewer FLOPs than the direct count (Winograd), "
              "see docs/metrics.md. Source: %s." % (peak, bw, doc["_name"]))


def throughput_vs_batch(figs, benches, sweeps):
    series = {}  # (title, label) -> {batch: images/s}
    contended_points = {}  # (title, label) -> batches measured while other processes used the machine
    for d in benches:
        for r in d.get("runs", []):
            key = ("%s, %s" % (d.get("model"), d.get("mode")), r["label"])
            series.setdefault(key, {})[d.get("batch")] = r["summary"]["images_per_s"]
            if contended(r):
                contended_points.setdefault(key, set()).add(d.get("batch"))
    for s in sweeps:
        for c in s.get("cells", []):
            ep = (c.get("log") or {}).get("epochs") or []
            if c.get("status") == "done" and ep and not c.get("ranks"):  # data-parallel cells: speedup_vs_ranks
                key = ("%s, training (sweep %s)" % (c["model"], s.get("name")), "%s %s lr %g" % (c["backend"], c["optimizer"], c["lr"]))
                series.setdefault(key, {})[c["batch"]] = sum(e["images_per_s"] for e in ep) / len(ep)
    for title in sorted({k[0] for k in series}):
        lines = {k[1]: v for k, v in series.items() if k[0] == title and len(v) >= 2}
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        marked = False
        for label, pts in sorted(lines.items()):
            b = sorted(pts)
            key = "series:" + label
            ax.plot(b, [pts[x] for x in b], marker="o", label=label, color=PALETTE.color(key),
                    linestyle=PALETTE.linestyle(key))
            bad = sorted(contended_points.get((title, label), ()))
            if bad:
                marked = True
                ax.scatter(bad, [pts[x] for x in bad], s=120, facecolors="none", edgecolors="red", zorder=5)
        if marked:
            ax.scatter([], [], s=120, facecolors="none", edgecolors="red", label="CONTENDED (others used the machine)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel("images / s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        figs.save(fig, "Throughput vs batch size: " + title,
                  "Images per second (bench: batch / median iteration time; sweep: mean over epochs) per backend.")


def steady_images_per_s(log):
    """Global images/s: the mean over epochs 2.. when there are several (as the sweep's table)."""
    ep = log.get("epochs") or []
    ep = ep[1:] if len(ep) > 1 else ep
    return sum(e["images_per_s"] for e in ep) / len(ep) if ep else None


def speedup_vs_ranks(figs, sweeps):
    series = {}  # (title, mode) -> {workers: images/s}
    for s in sweeps:
        for c in s.get("cells", []):
            ips = steady_images_per_s(c.get("log") or {})
            if c.get("ranks") and c.get("status") == "done" and ips:
                title = "%s, %s %s lr %g, batch %s per worker (sweep %s)" % (
                    c["model"], c["backend"], c["optimizer"], c["lr"], c["batch"], s.get("name"))
                series.setdefault((title, c["mode"]), {})[c["ranks"]] = ips
    for title in sorted({k[0] for k in series}):
        lines = {k[1]: v for k, v in series.items() if k[0] == title and 1 in v and len(v) >= 2}
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        most = max(max(v) for v in lines.values())
        ax.plot([1, most], [1, most], color="grey", linestyle="--", linewidth=1, label="ideal")
        for mode, pts in sorted(lines.items()):
            r = sorted(pts)
            ax.plot(r, [pts[x] / pts[1] for x in r], marker="o", label=mode)
        ax.set_xlabel("workers")
        ax.set_ylabel("speed-up over 1 worker")
        ax.set_xticks(sorted({x for v in lines.values() for x in v}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        figs.save(fig, "Data-parallel speed-up vs workers: " + title,
                  "Global images/s on n workers / on 1 worker of the same mode (after the first epoch when there are "
                  "several); parameter-server modes run their servers besides the workers.")


def train_label(t):
    """A train run's legend entry: backend (and its precision when not float32), optimizer, lr, batch."""
    precision = t.get("precision", "f32")
    return "%s%s %s lr %g batch %s" % (t.get("backend"), "" if precision == "f32" else " " + precision,
                                       t.get("optimizer"), t.get("lr"), t.get("batch"))


def smoothed(values, window):
    """Trailing mean over `window` steps (the first points average what there is)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def step_losses(figs, trains):
    """Per-step training loss of runs of one model and data that differ in precision (bf16
    against float32): the loss curve the precision trade-off is judged by."""
    groups = {}
    for t in trains:
        if t.get("steps"):
            groups.setdefault("%s on %s" % (t.get("model"), t.get("data")), []).append(t)
    for title, group in sorted(groups.items()):
        if len({t.get("precision", "f32") for t in group}) < 2:
            continue
        fig, ax = plt.subplots(figsize=(9, 4.2))
        for t in group:
            steps = t["steps"]
            window = max(1, len(steps) // 50)
            label = train_label(t)
            ax.plot([s["step"] for s in steps], smoothed([s["loss"] for s in steps], window), label=label,
                    color=PALETTE.color("series:" + label), linestyle=PALETTE.linestyle("series:" + label))
        ax.set_xlabel("step")
        ax.set_ylabel("train loss (trailing mean)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        agreements = ["%s: top-1 agreement with float32 inference %.2f%% over %d test rows" % (
            train_label(t), 100 * t["bf16"]["top1_agreement"], t["bf16"]["rows"]) for t in group if t.get("bf16")]
        figs.save(fig, "Training loss by precision: " + title,
                  "Per-step loss, a trailing mean over 2% of the run. " + "; ".join(agreements))


def curves(figs, trains, sweeps):
    runs = []  # (group title, label, epochs)
    for t in trains:
        runs.append(("%s on %s" % (t.get("model"), t.get("data")), train_label(t), t.get("epochs", [])))
    for s in sweeps:
        for c in s.get("cells", []):
            log = c.get("log") or {}
            where = " %s x%s" % (c["mode"], c["ranks"]) if c.get("ranks") else ""
            runs.append(("%s on %s (sweep %s)" % (c["model"], s.get("data"), s.get("name")),
                         "%s%s %s lr %g batch %s" % (c["backend"], where, c["optimizer"], c["lr"], c["batch"]),
                         log.get("epochs", [])))
    for title in sorted({r[0] for r in runs}):
        group = [r for r in runs if r[0] == title and r[2]]
        if not group:
            continue
        fig, (acc, loss) = plt.subplots(1, 2, figsize=(12, 4.2))
        tested = all(e.get("test_accuracy") is not None for _, _, ep in group for e in ep)
        for _, label, ep in group:
            x = [e["epoch"] for e in ep]
            style = dict(marker="o", label=label, color=PALETTE.color("series:" + label),
                         linestyle=PALETTE.linestyle("series:" + label))
            acc.plot(x, [e["test_accuracy"] if tested else e["train_accuracy"] for e in ep], **style)
            loss.plot(x, [e["train_loss"] for e in ep], **style)
        acc.set_xlabel("epoch")
        acc.set_ylabel("test accuracy" if tested else "train accuracy")
        loss.set_xlabel("epoch")
        loss.set_ylabel("train loss")
        loss.set_yscale("log")
        for ax in (acc, loss):
            ax.grid(alpha=0.3)
        loss.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
        figs.save(fig, "Accuracy and loss vs epoch: " + title,
                  "One line per backend, optimizer, lr and batch; diverged runs end at their last finished epoch.")


def generate_label(g):
    """A generate run's legend entry: model, backend, batch, and its decoding when it recomputes."""
    settings = g.get("settings") or {}
    label = "%s, %s, batch %s" % (g.get("model"), g.get("backend"), settings.get("batch"))
    return label + ("" if g.get("decoding") == "kv-cache" else ", " + str(g.get("decoding")))


def tokens_vs_context(figs, generates):
    """Decode tokens/s and the time to first token against the context depth (generate --context
    with two depths or more): what a growing KV cache costs."""
    swept = [g for g in generates if g.get("contexts") and len(g["contexts"]) >= 2]
    if not swept:
        return
    fig, (tps, ttft) = plt.subplots(1, 2, figsize=(12, 4.2))
    for g in swept:
        points = sorted(g["contexts"], key=lambda p: p["context"])
        label = generate_label(g)
        style = dict(marker="o", label=label, color=PALETTE.color("series:" + label),
                     linestyle=PALETTE.linestyle("series:" + label))
        x = [p["context"] for p in points]
        tps.plot(x, [p["decode_tokens_per_s"] for p in points], **style)
        ttft.plot(x, [p["ttft_ms"] for p in points], **style)
    tps.set_ylabel("decode tokens/s")
    ttft.set_ylabel("time to first token, ms")
    for ax in (tps, ttft):
        ax.set_xlabel("context depth (prompt tokens)")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    ttft.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    figs.save(fig, "Tokens/s vs context depth",
              "Medians over each depth's timed runs (generate --context D1,D2,...): decode tokens/s = batch x (new "
              "tokens - 1) / (last token's time - first's); the time to first token includes the prefill of the "
              "whole context.")


def latency_cdf(figs, generates):
    """The empirical distribution of the inter-token latency (every decode step of every timed
    run) per generate run, with its p50 and p99 in the legend."""
    drawn = []
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for g in generates:
        gaps = sorted(b - a for r in g.get("runs", []) for a, b in zip(r["token_ms"], r["token_ms"][1:]))
        if not gaps:
            continue
        n = len(gaps)
        p50, p99 = gaps[min(n - 1, n // 2)], gaps[min(n - 1, int(0.99 * n))]
        depth = " @ context %s" % g["contexts"][0].get("context") if g.get("contexts") else ""  # a sweep: its first depth's runs
        label = "%s%s (p50 %.3g ms, p99 %.3g ms, %d steps)" % (generate_label(g), depth, p50, p99, n)
        key = "series:" + generate_label(g)
        ax.step(gaps, [(i + 1) / n for i in range(n)], where="post", label=label, color=PALETTE.color(key),
                linestyle=PALETTE.linestyle(key))
        drawn.append(g)
    if not drawn:
        plt.close(fig)
        return
    ax.set_xlabel("inter-token latency, ms")
    ax.set_ylabel("share of decode steps at or below")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    figs.save(fig, "Inter-token latency CDF",
              "Every decode step of every timed run (the time between consecutive tokens; the first token's time is "
              "the TTFT, not a step). The percentiles in the legend are the nearest-rank ones of the steps drawn.")


def main():
    data = json.load(open(sys.argv[1]))
    figs = Figures(sys.argv[2])
    benches, trains, sweeps = data.get("bench", []), data.get("train", []), data.get("sweep", [])
    generates = data.get("generate", [])
    # A document that lacks a field a figure reads (hand-edited, or another tool's) costs that
    # figure, named in OUTDIR/skipped.json, not the report (it was a traceback).
    skipped = []

    def draw(what, runs, fn, *args):
        try:
            fn(figs, *args)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError) as e:
            plt.close("all")
            names = ", ".join(str(r.get("_name", "?")) for r in runs if isinstance(r, dict)) or "no run"
            reason = "the field %s is missing" % e if isinstance(e, KeyError) else "%s: %s" % (type(e).__name__, e)
            skipped.append("%s (from %s) not drawn: %s" % (what, names, reason))

    draw("throughput vs batch", benches + sweeps, throughput_vs_batch, benches, sweeps)
    for d in benches:
        draw("per-layer times", [d], stacked_layers, d)
        draw("roofline", [d], roofline, d)
    draw("speed-up vs ranks", sweeps, speedup_vs_ranks, sweeps)
    draw("training curves", trains + sweeps, curves, trains, sweeps)
    draw("step losses", trains, step_losses, trains)
    draw("tokens/s vs context depth", generates, tokens_vs_context, generates)
    draw("inter-token latency CDF", generates, latency_cdf, generates)
    json.dump(figs.items, open(os.path.join(sys.argv[2], "figures.json"), "w"), indent=1)
    json.dump(skipped, open(os.path.join(sys.argv[2], "skipped.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
