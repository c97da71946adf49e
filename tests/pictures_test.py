#!/usr/bin/python3
"""The pictures `optcast simulate --svg / --tree-svg` and `optcast schedule --svg` draw,
read back as XML and checked against what the same run reports in JSON and against the
papers: one row per rank, one send and one receive bar per message, every rank's finish
mark and the finish line at the report's times, the paper's bound line; Karp et al.'s
Figure 1 tree labels; Träff's Table 1 (p = 17) cell by cell against `optcast schedule
--json` (itself checked against the paper in schedule_test) and the paper's b row.

    tests/pictures_test.py PATH/TO/optcast
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

TOOL = os.environ.get("OPTCAST_TOOL", "build/tools/optcast")
NS = {"s": "http://www.w3.org/2000/svg"}


def run(*args, ok=(0,)):
    p = subprocess.run([TOOL, *args], capture_output=True, text=True, timeout=300)
    if p.returncode not in ok:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def svg_of(path):
    root = ET.parse(path).getroot()  # raises on malformed XML
    assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
    return root


def having(root, tag, cls):
    return [e for e in root.iter("{http://www.w3.org/2000/svg}" + tag) if e.get("class") == cls]


class Timeline(unittest.TestCase):
    def simulate(self, *args):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "run.svg")
            rep = json.loads(run("simulate", *args, "--json", "--svg", path).stdout)
            with open(path, "rb") as f:
                return rep, svg_of(path), f.read()

    def check_run(self, *args, rows_cap=64):
        rep, root, _ = self.simulate(*args)
        p = rep["p"]
        rows = having(root, "rect", "row")
        self.assertEqual(len(rows), min(p, rows_cap))
        self.assertEqual([int(r.get("data-rank")) for r in rows], list(range(min(p, rows_cap))))
        messages = having(root, "g", "message")
        if p <= rows_cap:
            self.assertEqual(len(messages), rep["messages"])
        for m in messages:
            sends = [e for e in m if e.get("class") == "send"]
            recvs = [e for e in m if e.get("class") == "recv"]
            src, dst = int(m.get("data-src")), int(m.get("data-dst"))
            self.assertEqual(len(sends), 1 if src < rows_cap else 0)
            self.assertEqual(len(recvs), 1 if dst < rows_cap else 0)
            self.assertNotEqual(src, dst)
            self.assertLessEqual(float(m.get("data-available")), rep["finish_time"] + 1e-9)
        # Every rank's finish mark at the report's per-rank finish, and the finish line.
        marks = having(root, "line", "rank-finish")
        self.assertEqual([float(l.get("data-t")) for l in marks],
                         [as_printed(t) for t in rep["per_rank_finish"][:rows_cap]])
        finish = having(root, "line", "finish")
        self.assertEqual(len(finish), 1)
        self.assertAlmostEqual(float(finish[0].get("data-t")), rep["finish_time"], places=4)
        # Its x is where the axis puts that time: the same scale as the ticks.
        ticks = having(root, "line", "grid")
        self.assertGreaterEqual(len(ticks), 2)
        x0, x1 = float(ticks[0].get("x1")), float(ticks[1].get("x1"))
        t1 = float([t for t in having(root, "text", "tick")][1].text)
        x_finish = x0 + rep["finish_time"] * (x1 - x0) / t1
        self.assertAlmostEqual(float(finish[0].get("x1")), x_finish, delta=0.05)
        if "paper_figure" in rep and not rep["paper_figure"]["promise"].startswith("reference"):
            bound = having(root, "line", "bound")
            self.assertEqual(len(bound), 1)
            self.assertAlmostEqual(float(bound[0].get("data-t")), rep["paper_figure"]["value"], places=4)
        return rep, root, messages

    def test_karp_logp_broadcast(self):
        rep, root, messages = self.check_run("--collective", "broadcast", "--algorithm", "logp_tree", "--p", "8",
                                             "--bytes", "1", "--model", "logp:6,2,4")
        self.assertEqual(rep["finish_time"], 24)
        # LogP: each send bar is the overhead o = 2 wide, each wire L = 6 long, on the same scale.
        scale = None
        for m in messages:
            send = [e for e in m if e.get("class") == "send"][0]
            wire = [e for e in m if e.get("class") == "wire"][0]
            w = float(send.get("width"))
            scale = scale or w / 2
            self.assertAlmostEqual(w, 2 * scale, delta=0.02)
            self.assertAlmostEqual(float(wire.get("x2")) - float(wire.get("x1")), 6 * scale, delta=0.02)

    def test_rounds_grid_circulant(self):
        rep, root, messages = self.check_run("--collective", "broadcast", "--algorithm", "circulant", "--p", "17",
                                             "--bytes", "3", "--blocks", "3", "--model", "rounds")
        self.assertEqual(rep["finish_time"], 3 - 1 + 5)  # n - 1 + ceil(log2 17)
        # A grid: every bar one round wide, starting on a round; blocks labelled 0..n-1.
        ticks = having(root, "line", "grid")
        col = float(ticks[1].get("x1")) - float(ticks[0].get("x1"))
        for m in messages:
            for bar in m:
                if bar.get("class") in ("send", "recv"):
                    self.assertAlmostEqual(float(bar.get("width")), col, delta=0.02)
                    r = (float(bar.get("x")) - float(ticks[0].get("x1"))) / col
                    self.assertAlmostEqual(r, round(r), delta=1e-3)
        self.assertEqual({m.get("data-block") for m in messages}, {"0", "1", "2"})

    def test_loggp_scatter_and_allreduce(self):
        self.check_run("--collective", "scatter", "--algorithm", "split_tree", "--p", "12", "--bytes", "64",
                       "--model", "loggp:5,1,2,0.01")
        self.check_run("--collective", "allreduce", "--p", "9", "--bytes", "4KiB", "--model", "loggp:5,1,2,0.01")

    def test_rows_cap_and_note(self):
        _, root, _ = self.check_run("--collective", "broadcast", "--p", "100", "--bytes", "1KiB", "--model",
                                    "logp:6,2,4", "--svg-rows", "10", rows_cap=10)
        notes = " ".join(t.text for t in having(root, "text", "note"))
        self.assertIn("ranks 10..99 not drawn", notes)

    def test_deterministic(self):
        args = ("--collective", "allgather", "--p", "7", "--bytes", "40", "--model", "loggp:5,1,2,0.01")
        self.assertEqual(self.simulate(*args)[2], self.simulate(*args)[2])


def as_printed(t):
    return float(f"{t:.6g}")


class Tree(unittest.TestCase):
    def test_karp_figure_1(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tree.svg")
            run("simulate", "--collective", "broadcast", "--algorithm", "logp_tree", "--p", "8", "--bytes", "1",
                "--model", "logp:6,2,4", "--tree-svg", path)
            root = svg_of(path)
        nodes = having(root, "g", "node")
        self.assertEqual(len(nodes), 8)
        # Karp et al., Figure 1: the optimal broadcast tree for P = 8, L = 6, g = 4, o = 2.
        labels = sorted(float(n.get("data-time")) for n in nodes)
        self.assertEqual(labels, [0, 10, 14, 18, 20, 22, 24, 24])
        shown = sorted(float([t for t in n if t.get("class") == "label"][0].text) for n in nodes)
        self.assertEqual(shown, labels)
        edges = having(root, "line", "edge")
        self.assertEqual(len(edges), 7)
        # The root's children (labels 10, 14, 18, 22) left to right in the order it sent.
        by_rank = {int(n.get("data-rank")): n for n in nodes}
        x = {r: float(n[0].get("cx")) for r, n in by_rank.items()}
        kids = [int(e.get("data-to")) for e in edges if e.get("data-from") == "0"]
        kid_labels = [float(by_rank[k].get("data-time")) for k in sorted(kids, key=lambda k: x[k])]
        self.assertEqual(kid_labels, [10, 14, 18, 22])

    def test_not_a_tree(self):
        with tempfile.TemporaryDirectory() as d:
            p = run("simulate", "--collective", "broadcast", "--algorithm", "circulant", "--p", "8", "--bytes", "4",
                    "--blocks", "4", "--tree-svg", os.path.join(d, "t.svg"), ok=(2,))
        self.assertIn("received more than one message", p.stderr)


class Schedule(unittest.TestCase):
    def test_traff_table_1(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.svg")
            table = json.loads(run("schedule", "--p", "17", "--json", "--svg", path).stdout)
            root = svg_of(path)
        cells = {}
        for c in having(root, "g", "cell"):
            cells[(int(c.get("data-row")), int(c.get("data-col")))] = int(c.get("data-value"))
            self.assertEqual(c[1].text, c.get("data-value"))
        want = [table["baseblock"]] + table["recvblock"] + table["sendblock"]
        self.assertEqual(len(cells), len(want) * 17)
        for i, row in enumerate(want):
            self.assertEqual([cells[(i, c)] for c in range(17)], row)
        # Träff's Table 1, row b (p = 17).
        self.assertEqual(want[0], [5, 0, 1, 2, 0, 3, 0, 1, 2, 4, 0, 1, 2, 0, 3, 0, 1])
        names = [t.text for t in having(root, "text", "row-name")]
        self.assertEqual(names, ["b"] + [f"recvblock[{k}]" for k in range(5)] + [f"sendblock[{k}]" for k in range(5)])

    def test_refuses_huge(self):
        p = run("schedule", "--p", "5000", "--svg", "/dev/null", ok=(2,))
        self.assertIn("p <= 1024", p.stderr)


def under_terminal(*args, program=None):
    """Runs the tool with a pseudo-terminal as stdin, stdout and stderr: what a user sees."""
    import pty
    leader, follower = pty.openpty()
    p = subprocess.Popen([program or TOOL, *args], stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    return p.wait(), out.decode(errors="replace")


class Progress(unittest.TestCase):
    # optcast verify runs long enough (about a second) for its progress line to show.
    args = ("verify", "--pmax", "500", "--blocks", "1,16")

    def test_on_a_terminal(self):
        rc, out = under_terminal(*self.args)
        self.assertEqual(rc, 0)
        self.assertIn("\rverify: p = ", out)
        self.assertIn("\r\x1b[K", out)  # erased before the result
        self.assertIn("verified p = 1..500", out)

    def test_quiet_or_not_a_terminal(self):
        rc, out = under_terminal(*self.args, "--quiet")
        self.assertEqual(rc, 0)
        self.assertNotIn("verify: p =", out)
        p = run(*self.args)
        self.assertNotIn("verify: p =", p.stderr + p.stdout)
        self.assertNotIn("\r", p.stderr + p.stdout)


class BenchProgress(unittest.TestCase):
    # Two rotation broadcasts on 1000 ranks, about 0.9 s and 1.8 s here, ten times that
    # under ASan: the first must outlast the 0.3 s before the line first shows.
    args = ("rounds", "--n", "1000", "--m", "800,1600", "--k", "2", "--algorithms", "rotation")

    def setUp(self):
        if not BENCH:
            self.skipTest("no optcast-bench given (second argument)")

    def test_on_a_terminal(self):
        rc, out = under_terminal(*self.args, program=BENCH)
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"\rrounds: \d+ of 2 runs")
        self.assertIn("\r\x1b[K", out)
        self.assertIn("simulated rounds model", out)

    def test_quiet_or_not_a_terminal(self):
        rc, out = under_terminal(*self.args, "--quiet", program=BENCH)
        self.assertEqual(rc, 0)
        self.assertNotIn("rounds: ", out)
        p = subprocess.run([BENCH, *self.args], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("\r", p.stderr + p.stdout)


BENCH = None

if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        TOOL = sys.argv.pop(1)
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        BENCH = sys.argv.pop(1)
    unittest.main()
