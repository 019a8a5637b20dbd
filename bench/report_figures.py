#!/usr/bin/env python3
"""The figures of a `mosaic report` page as SVG files, to commit beside a recorded table
(docs/seeds/): every <img class="figure"> of the page, written as PREFIX_N.svg in OUT_DIR
(N from 1, in the page's order), and its title (the image's alt text) printed beside the
file name. A page without figures, or a figure that is not an inline SVG, is an error.

usage: bench/report_figures.py REPORT.html OUT_DIR PREFIX
"""
import base64
import html
import os
import re
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    page, out_dir, prefix = sys.argv[1:]
    text = open(page, encoding="utf-8").read()
    figures = re.findall(r'<img class="figure" alt="([^"]*)" src="data:([^;]+);base64,([^"]+)"', text)
    if not figures:
        sys.exit(f"report_figures: no figures in {page}")
    os.makedirs(out_dir, exist_ok=True)
    for n, (alt, mime, data) in enumerate(figures, 1):
        if mime != "image/svg+xml":
            sys.exit(f"report_figures: {page}: figure {n} is {mime}, not an inline SVG")
        path = os.path.join(out_dir, f"{prefix}_{n}.svg")
        with open(path + ".tmp", "wb") as f:
            f.write(base64.b64decode(data))
        os.replace(path + ".tmp", path)
        print(f"{path}: {html.unescape(alt)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
