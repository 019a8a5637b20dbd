"""What the benchmark scripts share: writing their JSON whole, and replacing their table in a
document between two markers."""
import json
import os
import sys


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
