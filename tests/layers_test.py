#!/usr/bin/env python3
"""The layers of the tree, and the test that keeps them: no file includes a file of a layer
it may not reach (docs/DESIGN.md, "Layers", draws this table; --markdown prints it).

Every source file of the library, its public headers, the bindings and the programs
belongs to exactly one layer, by the first row whose patterns match its path; a file no
row names fails the test (a new folder must say where it stands). Each layer lists the
layers below it that it may include; its own it always may. An include is resolved as the
compiler would (the including file's folder, then the build's include directories) and
judged by the layer of the file it finds; headers from outside the tree are not judged.

Usage: layers_test.py SOURCE_ROOT [--markdown | --write-design]
  --markdown      print the table
  --write-design  put the table into docs/DESIGN.md (the test fails while it differs)
"""
import fnmatch
import os
import re
import subprocess
import sys

# (layer, what it is, path patterns, the layers it may include)
LAYERS = [
    ("core", "the fabric contract and what every layer stands on: errors, logs, coroutine tasks, "
     "the cost models' vocabulary, fabric_base with its survival bookkeeping and control messages "
     "(lib/survival/'s lower half)",
     ["include/optcast/error.hpp", "include/optcast/log.hpp", "include/optcast/algorithm.hpp",
      "include/optcast/reduction.hpp", "include/optcast/scratch.hpp", "include/optcast/topology.hpp",
      "include/optcast/cost_model.hpp", "include/optcast/task.hpp", "include/optcast/when_all.hpp",
      "include/optcast/fabric.hpp", "include/optcast/fabric_base.hpp", "include/optcast/operation.hpp",
      "include/optcast/tags.hpp", "include/optcast/call_signature.hpp", "include/optcast/trace.hpp",
      "include/optcast/progress.hpp", "include/optcast/survivable.hpp", "lib/core/*",
      # The survival folder's bookkeeping, which fabric_base keeps for every transport;
      # shrink and grow, built on communicators, are the jobs layer's (below).
      "lib/survival/survival.*", "lib/survival/agreement.*", "lib/survival/control_wire.*"],
     []),
    ("net", "the fabrics (TCP, libfabric, in-process, simulator), the bootstrap, job secrets, "
     "starting local ranks",
     ["include/optcast/net/*", "include/optcast/fabrics.hpp", "include/optcast/launch.hpp", "net/*"],
     ["core"]),
    ("communicator", "the communicator: its calls' numbering, plan caches, traces",
     ["include/optcast/communicator.hpp", "lib/runtime/*"],
     ["core"]),
    ("algorithms", "each paper's plans, schedules and round loops, and the baselines",
     ["lib/round_loops.hpp", "lib/blocks.hpp", "lib/traff/*", "lib/traff_hunold/*", "lib/karp/*",
      "lib/bruck_cypher_ho/*", "lib/bar_noy_ho/*", "lib/static_schedules/*", "lib/alexandrov/*",
      "lib/baseline/*", "include/optcast/logp.hpp"],
     ["core", "communicator"]),
    ("collectives", "the entry points, the registry, the cost model's predictions and choice, "
     "calibration, streams",
     ["include/optcast/collectives.hpp", "include/optcast/erased.hpp", "include/optcast/choose.hpp", "include/optcast/predict.hpp",
      "include/optcast/calibrate.hpp", "include/optcast/stream.hpp", "include/optcast/bounds.hpp",
      "lib/collectives/*", "lib/model/*"],
     ["core", "communicator", "algorithms"]),
    ("jobs", "what joins the fabrics to the collectives: join, split, shrink and grow (lib/survival/'s upper half), "
     "the asynchronous entry points, the simulator's harness and its pictures",
     ["include/optcast/join.hpp", "include/optcast/survive.hpp", "include/optcast/asio.hpp",
      "include/optcast/simulate.hpp", "include/optcast/picture.hpp", "include/optcast/optcast.hpp",
      "lib/membership/*", "lib/survival/*", "lib/simulate/*", "lib/picture/*"],
     ["core", "net", "communicator", "algorithms", "collectives"]),
    ("bindings", "language bindings: clients of the installed headers only",
     ["bindings/*"],
     ["core", "net", "communicator", "algorithms", "collectives", "jobs"]),
    ("programs", "the tools, examples, benchmarks and tests",
     ["tools/*", "examples/*", "benchmarks/*", "tests/*"],
     ["core", "net", "communicator", "algorithms", "collectives", "jobs"]),
]

# Layers whose files may include only the installed headers (include/) of the layers
# below, as a program built against an installed optcast would.
PUBLIC_ONLY = {"bindings"}

# Where the build looks for a quoted or angled include after the including file's folder.
SEARCH = ["include", "lib", "lib/collectives", "net", "."]

SOURCE = re.compile(r"\.(cpp|hpp|h|cc)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(path):
    for name, _, patterns, _ in LAYERS:
        for p in patterns:
            if fnmatch.fnmatchcase(path, p):
                return name
    return None


def resolve(files, src, quote, name):
    cands = [os.path.normpath(os.path.join(os.path.dirname(src), name))] if quote == '"' else []
    cands += [os.path.normpath(os.path.join(d, name)) for d in SEARCH]
    for c in cands:
        if c in files:
            return c
    return None


def check(root):
    listed = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split()
    files = set(listed)
    allowed = {name: set(below) | {name} for name, _, _, below in LAYERS}
    problems = []
    checked = 0
    for src in sorted(f for f in files if SOURCE.search(f) and os.path.exists(os.path.join(root, f))):
        if src.startswith("tests/fuzz/corpus") or src.startswith("tests/cluster/"):
            continue
        mine = layer_of(src)
        if mine is None:
            problems.append(f"{src}: in no layer (add its folder to a row of LAYERS in tests/layers_test.py)")
            continue
        with open(os.path.join(root, src), errors="replace") as fh:
            text = fh.read()
        for line_no, m in ((text.count("\n", 0, m.start()) + 1, m) for m in INCLUDE.finditer(text)):
            target = resolve(files, src, m.group(1), m.group(2))
            if target is None:
                continue
            checked += 1
            theirs = layer_of(target)
            if theirs is None:
                problems.append(f"{src}:{line_no}: includes {target}, which is in no layer")
            elif theirs not in allowed[mine]:
                problems.append(f"{src}:{line_no}: includes {target}: layer '{mine}' may not reach "
                                f"layer '{theirs}' (it may reach: {', '.join(sorted(allowed[mine]))})")
            elif mine in PUBLIC_ONLY and theirs != mine and not target.startswith("include/"):
                problems.append(f"{src}:{line_no}: includes {target}: layer '{mine}' uses the installed "
                                "headers only (include/optcast/)")
    return problems, checked


def markdown():
    out = ["| layer | what | where | may include |", "| --- | --- | --- | --- |"]
    for name, what, patterns, below in reversed(LAYERS):
        where = ", ".join(f"`{p}`" for p in patterns)
        out.append(f"| {name} | {what} | {where} | {', '.join(below) if below else '(nothing of the tree)'} |")
    return "\n".join(out)


BEGIN = "<!-- layers: generated by `tests/layers_test.py --markdown`; the layers test keeps it so -->"
END = "<!-- end of layers -->"


def design_block(root, write=False):
    """None if docs/DESIGN.md shows the table; otherwise what is wrong."""
    path = os.path.join(root, "docs", "DESIGN.md")
    with open(path) as fh:
        text = fh.read()
    if BEGIN not in text or END not in text:
        return f"docs/DESIGN.md lacks the markers of the layers' table ({BEGIN} ... {END})"
    a = text.index(BEGIN) + len(BEGIN)
    b = text.index(END)
    want = "\n" + markdown() + "\n"
    if text[a:b] == want:
        return None
    if write:
        with open(path, "w") as fh:
            fh.write(text[:a] + want + text[b:])
        return None
    return "docs/DESIGN.md's table of layers differs from tests/layers_test.py's: run it with --write-design"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--help" in sys.argv or len(args) != 1:
        print(__doc__.strip())
        return 0 if "--help" in sys.argv else 2
    if "--markdown" in sys.argv:
        print(markdown())
        return 0
    if "--write-design" in sys.argv:
        design_block(args[0], write=True)
        return 0
    problems, checked = check(args[0])
    if (why := design_block(args[0])) is not None:
        problems.append(why)
    for p in problems:
        print(p)
    if problems:
        print(f"layers: {len(problems)} include(s) break the layering (docs/DESIGN.md, \"Layers\")")
        return 1
    print(f"layers: {checked} includes within the tree, each downward or within its layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
