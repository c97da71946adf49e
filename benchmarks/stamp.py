#!/usr/bin/env python3
"""Writes DIR/run.json: when and at which commit a benchmark ran, and its command.

usage: stamp.py DIR KIND COMMAND [KEY=VALUE...]

KIND says how benchmarks/figures.py shows the run: "output" (DIR/output.txt as it is) or
"table" (benchmarks/table.py over the files named by files=a.txt,b.txt; p=, rate_mbit=
give its bounds). Other KEY=VALUE pairs are kept for the reader (flow_mbit=, hosts=).
"""
import datetime
import json
import os
import subprocess
import sys

if len(sys.argv) < 4 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help") else 2)
d, kind, command = sys.argv[1], sys.argv[2], sys.argv[3]
if kind not in ("output", "table"):
    sys.exit("stamp.py: KIND is output or table, not %r" % kind)
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git(*args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True).stdout.strip()


commit = git("rev-parse", "--short=10", "HEAD") or "unknown"
# Code that differs from the commit makes the run "+dirty"; the recorded results and the
# docs (which are written while a run goes on) do not.
if [l for l in git("status", "--porcelain", "--untracked-files=no").splitlines()
        if "benchmarks/results/" not in l and not l.endswith(".md")]:
    commit += "+dirty"
run = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "commit": commit, "command": command, "kind": kind}
for kv in sys.argv[4:]:
    k, _, v = kv.partition("=")
    run[k] = v.split(",") if k == "files" else v
with open(os.path.join(d, "run.json"), "w") as f:
    json.dump(run, f, indent=1, sort_keys=True)
    f.write("\n")
