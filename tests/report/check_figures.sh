#!/usr/bin/env bash
# The committed figures (docs/seeds/*.svg: the seeds' tables redone) opened in headless
# Chromium, as tests/report/check_report.sh opens the report: every figure must decode to an
# image of non-zero size. A truncated or malformed SVG fails here with its name.
# Usage: check_figures.sh DIR WORKDIR
set -euo pipefail
dir=$(realpath "$1")
work=$(realpath -m "$2")
command -v chromium >/dev/null || { echo "FAIL: chromium is not installed (scripts/setup.sh installs it)"; exit 1; }
shopt -s nullglob
figures=("$dir"/*.svg)
[ "${#figures[@]}" -gt 0 ] || { echo "FAIL: no .svg figures in $dir"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
{
  echo '<!DOCTYPE html><html><body>'
  for f in "${figures[@]}"; do echo "<img class=\"figure\" alt=\"$(basename "$f")\" src=\"file://$f\">"; done
  echo "<script>window.addEventListener('load', function () {"
  echo "  var bad = [], imgs = document.querySelectorAll('img.figure');"
  echo "  imgs.forEach(function (i) { if (!(i.complete && i.naturalWidth > 0)) bad.push(i.alt); });"
  echo "  document.body.setAttribute('data-figures-loaded', (imgs.length - bad.length) + '/' + imgs.length);"
  echo "  document.body.setAttribute('data-figures-failed', bad.join(' '));"
  echo "});</script></body></html>"
} > "$work/figures.html"
chromium --headless --no-sandbox --disable-gpu --allow-file-access-from-files --user-data-dir="$work/chrome" \
  --dump-dom "file://$work/figures.html" > "$work/dom.html" 2> "$work/chrome.log" \
  || { cat "$work/chrome.log"; echo "FAIL: chromium could not open the page"; exit 1; }
n=${#figures[@]}
loaded=$(grep -o 'data-figures-loaded="[0-9]*/[0-9]*"' "$work/dom.html" || true)
if [ "$loaded" != "data-figures-loaded=\"$n/$n\"" ]; then
  failed=$(grep -o 'data-figures-failed="[^"]*"' "$work/dom.html" || true)
  echo "FAIL: figures decoded in Chromium: '${loaded:-none (the load handler did not run)}', expected $n/$n; $failed"
  exit 1
fi
echo "PASS: $n/$n figures in $dir decoded in Chromium"
