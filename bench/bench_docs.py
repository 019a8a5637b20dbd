"""What the benchmark scripts share: running `mosaic ... --json`, naming the CPU, writing their
JSON whole, and replacing their table in a document between two markers."""
import json
import os
import subprocess
import sys
import tempfile


def cpu_description():
    """"AMD EPYC ... (2 logical cores)": the CPU's model name from /proc/cpuinfo and the count."""
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu} ({os.cpu_count()} logical cores)"


def mosaic_json(mosaic, cmd, who):
    """Runs `MOSAIC CMD --json TMP` and returns the document; exits naming `who` with the
    command's output when it fails."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        full = [mosaic] + cmd + ["--json", path]
        print("$ " + " ".join(full[1:]), file=sys.stderr, flush=True)
        r = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.exit(f"{who}: {' '.join(full)} failed (exit {r.returncode}):\n{r.stdout[-3000:]}")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def write_json(path, doc):
    """Writes `doc` to `path` through a temporary file, so a reader never sees half of it."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(path + ".tmp", path)


def replace_table(path, name, table, who):
    """Replaces what lies between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in `path` with
    `table`; exits naming `who` and the file when the markers are missing."""
    text = open(path).read()
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        sys.exit(f"{who}: {path} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path + ".tmp", "w") as f:
        f.write(head + begin + "\n" + table + end + tail)
    os.replace(path + ".tmp", path)
