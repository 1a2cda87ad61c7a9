#!/bin/bash
# `toolbox plan results/demo/` on fresh clones, first call, commits alternating over 3 rounds; prints
# one line per call (seconds, the load average before it, the jobs planned for demo).
#   bash benchmarks/plan_first_call.sh <commit> [<commit> ...] > benchmarks/results/plan_first_call.txt
set -u
repo=$(git rev-parse --show-toplevel)
venv=$repo/.venv
for round in 1 2 3; do
  for c in "$@"; do
    d=$(mktemp -d)/clone
    git clone -q "$repo" "$d" && git -C "$d" checkout -q "$c" && ln -s "$venv" "$d/.venv"
    load=$(cut -d' ' -f1 /proc/loadavg)
    s=$(date +%s.%N)
    (cd "$d" && PYTHONPATH=$d .venv/bin/toolbox plan results/demo/ > "$d.plan.txt" 2>&1); rc=$?
    e=$(date +%s.%N)
    echo "round $round commit $c rc $rc seconds $(echo "$e - $s" | bc) load_before $load jobs $(grep -c '^| demo' "$d.plan.txt")"
    rm -rf "$(dirname "$d")"
  done
done
