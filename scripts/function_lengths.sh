#!/usr/bin/env bash
# The longest functions outside tests, from Universal Ctags' end lines (apt-get install
# universal-ctags): issue 54's bar is none over 120 lines. Prints "LINES FILE FUNCTION" for each
# function longer than LIMIT, longest first; exits 1 if there is one.
# usage: scripts/function_lengths.sh [LIMIT]   (default 120)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-120}
if ! ctags --version 2>/dev/null | grep -q "Universal Ctags"; then
  echo "function_lengths.sh: needs Universal Ctags (apt-get install universal-ctags)" >&2
  exit 2
fi
ctags --fields=+ne --c++-kinds=f -R -f - --languages=C++ --langmap=C++:+.cu.cuh \
    api backends bench cli core data distributed frontends ir metrics operators python validate examples 2>/dev/null |
  awk -F'\t' -v limit="$limit" '{
      line = ""; end = "";
      for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) line = substr($i, 6); if ($i ~ /^end:/) end = substr($i, 5) }
      if (line != "" && end != "" && end - line + 1 > limit) print end - line + 1, $2, $1
    }' | sort -rn | awk 'BEGIN { found = 0 } { print; found = 1 } END { exit found }'
