#!/usr/bin/env python3
"""The docs' measured figures, generated from the benchmarks' own recorded output.

usage: figures.py [--write] FILE...

In each markdown FILE, a block

  <!-- figures: benchmarks/results/NAME [OPTIONS] -->
  ...
  <!-- end of figures -->

holds what the run recorded in benchmarks/results/NAME shows (its run.json: date,
commit, command, and how to show it), under a line saying when, at which commit and by
which command it was measured. A run of kind "output" is its output.txt as it is; one of
kind "table" is benchmarks/table.py over its files (OPTIONS go to table.py: --sizes,
--ops). Without --write, checks that every block is what its run gives and exits 1
naming those that are not (tests/figures_test.sh); with --write, rewrites them.
Record a run with benchmarks/record.sh, or benchmarks/side_by_side.sh --record NAME.
"""
import difflib
import json
import os
import re
import shlex
import subprocess
import sys

repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
block = re.compile(r"(<!-- figures: (\S+)([^>]*?) -->\n)(.*?)(<!-- end of figures -->)", re.S)


def render(where, options):
    d = os.path.join(repo, where)
    try:
        with open(os.path.join(d, "run.json")) as f:
            run = json.load(f)
    except OSError as e:
        raise SystemExit("figures.py: %s: %s (record the run first: benchmarks/record.sh)" % (where, e.strerror))
    stamp = "_Measured %s at commit `%s`: `%s`_\n\n" % (run["date"], run["commit"], run["command"])
    if run["kind"] == "output":
        with open(os.path.join(d, "output.txt")) as f:
            text = f.read()
        return stamp + "```text\n" + text + ("" if text.endswith("\n") else "\n") + "```\n"
    args = [sys.executable, os.path.join(repo, "benchmarks", "table.py"), "--p", str(run["p"]), "--rate-mbit", str(run["rate_mbit"])]
    args += ["--ppn", str(run.get("ppn", 1)), "--rails", str(run.get("rails", 1))]  # older runs: one rank, one rail
    if int(run.get("sittings", 1)) > 1:
        args.append("--sittings")
    args += shlex.split(options) + [os.path.join(d, f) for f in run["files"]]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout:
        raise SystemExit("figures.py: %s: table.py failed: %s" % (where, out.stderr.strip()))
    return stamp + out.stdout


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    write = args[0] == "--write"
    files = args[1:] if write else args
    stale = []
    count = 0
    for path in files:
        with open(path) as f:
            text = f.read()

        def fix(m):
            nonlocal count
            count += 1
            want = render(m.group(2), m.group(3).strip())
            if m.group(4) != want:
                stale.append((path, m.group(2), m.group(4), want))
            return m.group(1) + want + m.group(5)

        new = block.sub(fix, text)
        if write and new != text:
            with open(path, "w") as f:
                f.write(new)
    if write:
        print("figures.py: %d blocks, %d rewritten" % (count, len(stale)))
        return 0
    for path, where, have, want in stale:
        print("%s: the figures from %s are not what the run recorded there gives; regenerate with "
              "benchmarks/figures.py --write %s" % (path, where, path))
        sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), "in the file", "from the run"))
    if not stale:
        print("figures.py: %d blocks in %d files, each what its recorded run gives" % (count, len(files)))
    return 1 if stale else 0


sys.exit(main())
