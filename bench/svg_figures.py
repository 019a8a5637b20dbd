"""Drawing a bench script's figures as SVG with matplotlib, in Debian's Python
(/usr/bin/python3 has python3-matplotlib; the peers' virtual environment need not), from a JSON
spec: the drawing code reads the spec's path from sys.argv[1] and starts after HEADER, which
makes the SVG small (text as text) and the same for the same spec (no date, a fixed hash salt).
"""
import json
import os
import subprocess
import tempfile

HEADER = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: small files
matplotlib.rcParams["svg.hashsalt"] = "mosaic"  # the same SVG from the same JSON
import matplotlib.pyplot as plt
spec = json.load(open(sys.argv[1]))
"""


def draw(code, spec, python="/usr/bin/python3"):
    """Runs HEADER + code on `spec` (JSON-serialisable) in `python`; raises if it fails."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        subprocess.run([python, "-c", HEADER + code, f.name], check=True)
    finally:
        os.unlink(f.name)
