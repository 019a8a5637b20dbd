#!/usr/bin/env python3
"""Prints docs/conformance.md's corpus table: each model x exporter of tests/corpus/cases
(MANIFEST.tsv) with ONNX Runtime's result and each backend's verdict, alone and with the
naive oracle as fallback ("pass+3": three nodes ran on naive).

    /usr/bin/python3 tests/corpus/tabulate.py build/mosaic tests/corpus/cases
"""
import re
import subprocess
import sys


def verdicts(mosaic, cases, backend, fallback):
    cmd = [mosaic, "verify", cases, "--backend", backend] + (["--fallback", "naive"] if fallback else [])
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        m = re.match(r"^(PASSED|FAILED|UNSUPPORTED) (\S+) \[(\w+)\](.*)$", line)
        if not m:
            continue
        verdict, case, _, rest = m.groups()
        if verdict == "PASSED":
            k = sum(int(n) for n in re.findall(r"; (\d+) nodes on naive", rest))
            got[case] = "pass" + (f"+{k}" if k else "")
        elif verdict == "FAILED":
            got[case] = "FAILED"
        else:
            op = re.search(r"\((\w+)\): (operator \w+ is not supported|no backend can run it|element type \w+|[^(]*)", rest)
            got[case] = "-" if not op else f"- ({op.group(1)})"
    return got


def main():
    mosaic, cases = sys.argv[1], sys.argv[2]
    rows = [l.split("\t") for l in open(f"{cases}/MANIFEST.tsv").read().splitlines()[1:]]
    backends = subprocess.run([mosaic, "backends", "--names", "--available"], capture_output=True,
                              text=True).stdout.split()
    alone = {b: verdicts(mosaic, cases, b, False) for b in backends}
    helped = {b: verdicts(mosaic, cases, b, True) for b in backends if b != "naive"}
    print("| model | family | exporter | opset | ONNX Runtime | " + " | ".join(backends) + " |")
    print("|---|---|---|---|---|" + "---|" * len(backends))
    totals = {b: [0, 0] for b in backends}
    for model, family, exporter, opset, result, reason, _ in sorted(rows):
        case = f"{model}.{exporter}"
        ort = "agrees" if result == "ok" else f"{result}"
        cells = []
        for b in backends:
            a = alone[b].get(case, "")
            h = helped.get(b, {}).get(case, a)
            if result != "ok":
                cells.append("")
                continue
            totals[b][0] += a.startswith("pass")
            totals[b][1] += h.startswith("pass")
            cells.append(a if a.startswith("pass") or h == a else f"{h}")
        print(f"| {model} | {family} | {exporter} | {opset} | {ort} | " + " | ".join(cells) + " |")
    n = sum(r[4] == "ok" for r in rows)
    print()
    print(f"Of {n} cases ONNX Runtime runs: " + "; ".join(
        f"{b} {t[0]} alone" + ("" if b == "naive" else f", {t[1]} with naive as fallback") for b, t in totals.items()))


if __name__ == "__main__":
    main()
