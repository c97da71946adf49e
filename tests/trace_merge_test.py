#!/usr/bin/python3
"""Live traces end to end: OPTCAST_TRACE=DIR on a 4-rank optcast-bench run over TCP on
loopback, then `optcast trace merge`. Each rank's file is Chrome trace-event JSON with
its measured clock offset; the merged file starts at 0, every send's flow has its
receive and none runs backwards, every operation slice lies inside its collective's,
slices on one lane never overlap. With one rank's clock moved 5 s ahead (its file
shifted, its measured offset saying so), merge puts it back; with the offset missing,
merge reports the messages that run backwards.

    tests/trace_merge_test.py PATH/TO/optcast PATH/TO/optcast-bench
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

TOOL, BENCH = "build/tools/optcast", "build/examples/optcast-bench"


def run(args, ok=(0,), env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    if p.returncode not in ok:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


class Traces(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="optcast-trace-")
        cls.dir = os.path.join(cls.tmp, "run")
        env = dict(os.environ, OPTCAST_TRACE=cls.dir)
        run([BENCH, "coll", "--np", "4", "-o", "bcast,allreduce,scatter", "-l", "65539", "-t", "0", "-m", "2", "-r", "2"], env=env)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def load(self, path):
        with open(path) as f:
            return json.load(f)

    def test_rank_files(self):
        names = sorted(os.listdir(self.dir))
        self.assertEqual(names, [f"rank{r}.json" for r in range(4)])
        for r in range(4):
            j = self.load(os.path.join(self.dir, f"rank{r}.json"))
            meta = j["optcast"]
            self.assertEqual(meta["rank"], r)
            self.assertEqual(meta["clock"], "monotonic")
            self.assertEqual(meta["dropped"], 0)
            # One host, one clock: the measured offset is 0 within its error bound.
            self.assertIsInstance(meta["clock_offset_s"], float if r else (int, float))
            self.assertLessEqual(abs(meta["clock_offset_s"]), meta["clock_error_s"] + 1e-6)
            names = {e["name"] for e in j["traceEvents"] if e.get("cat") == "collective"}
            self.assertTrue({"broadcast", "allreduce", "scatter"} <= names, names)

    def merged(self, src, name):
        out = os.path.join(self.tmp, name)
        p = run([TOOL, "trace", "merge", src, "-o", out])
        return self.load(out), p.stdout

    def test_merge(self):
        j, summary = self.merged(self.dir, "all.json")
        ev = j["traceEvents"]
        self.assertIn("merged 4 ranks", summary)
        self.assertEqual(min(e["ts"] for e in ev if "ts" in e), 0)
        self.assertEqual({e["pid"] for e in ev if e.get("name") == "process_name"}, {0, 1, 2, 3})
        # Every send's flow has its receive, later in time.
        starts = {e["id"]: e for e in ev if e["ph"] == "s"}
        ends = {e["id"]: e for e in ev if e["ph"] == "f"}
        self.assertGreater(len(starts), 0)
        self.assertEqual(set(starts), set(ends))
        for i, s in starts.items():
            self.assertLessEqual(s["ts"], ends[i]["ts"] + 1e-3)
            self.assertNotEqual(s["pid"], ends[i]["pid"])
        self.assertEqual(j["optcast"]["messages"], len(starts))
        self.assertEqual(j["optcast"]["backwards"], 0)
        # Slices: ops inside their collective (same rank, same seq); no overlap in a lane.
        slices = [e for e in ev if e["ph"] == "X"]
        calls = collections.defaultdict(list)
        for e in slices:
            if e["cat"] == "collective":
                calls[(e["pid"], e["args"]["seq"])].append(e)
        inside = 0
        for e in slices:
            if e["cat"] in ("send", "recv") and (e["pid"], e["args"]["seq"]) in calls:
                c = calls[(e["pid"], e["args"]["seq"])][0]
                self.assertGreaterEqual(e["ts"] + 1e-3, c["ts"])
                self.assertLessEqual(e["ts"] + e["dur"], c["ts"] + c["dur"] + 1e-3)
                inside += 1
        self.assertGreater(inside, len(starts))  # both ends of (nearly) every message
        lanes = collections.defaultdict(list)
        for e in slices:
            lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
        for spans in lanes.values():
            spans.sort()
            for a, b in zip(spans, spans[1:]):
                self.assertLessEqual(a[1], b[0] + 1e-3)
        bcast = [e for e in slices if e["cat"] == "collective" and e["name"] == "broadcast"]
        self.assertTrue(all(e["args"]["bytes"] == 65539 and e["args"]["root"] == 0 and e["args"]["algorithm"] for e in bcast))

    def shifted(self, name, offset_known):
        d = os.path.join(self.tmp, name)
        shutil.copytree(self.dir, d)
        path = os.path.join(d, "rank2.json")
        j = self.load(path)
        for e in j["traceEvents"]:
            if "ts" in e:
                e["ts"] += 5e6  # rank 2's clock 5 s ahead of rank 0's
        j["optcast"]["clock_offset_s"] = j["optcast"]["clock_offset_s"] - 5 if offset_known else None
        with open(path, "w") as f:
            json.dump(j, f)
        return d

    def test_merge_aligns_clocks(self):
        j, _ = self.merged(self.shifted("skewed", True), "aligned.json")
        self.assertEqual(j["optcast"]["backwards"], 0)
        self.assertLess(max(e["ts"] for e in j["traceEvents"] if "ts" in e), 4e6)  # not 5 s long
        j, summary = self.merged(self.shifted("unaligned", False), "unaligned.json")
        self.assertGreater(j["optcast"]["backwards"], 0)
        self.assertIn("received before they were sent", summary)
        self.assertIn("ranks without a measured offset: 2", summary)

    def synthetic(self, name, errors_us):
        # Rank 0 sends to 1 at 100 us; 1 takes it at 95 on its clock (so 1's offset is at
        # least 5) and sends to 2 at 200, which 2 takes at 190 (2's at least 1's + 10);
        # rank 0 to 3 at 100, taken at 500 (no constraint near 3's estimate of 3 us).
        d = os.path.join(self.tmp, name)
        os.mkdir(d)
        flows = {0: [("s", 1, 100), ("s", 3, 100)], 1: [("f", 1, 95), ("s", 2, 200)], 2: [("f", 2, 190)], 3: [("f", 3, 500)]}
        offsets = {0: 0, 1: 0, 2: 0, 3: 3}
        for r, events in flows.items():
            meta = {"rank": r, "clock": "monotonic", "dropped": 0,
                    "clock_offset_s": offsets[r] * 1e-6, "clock_error_s": errors_us[r] * 1e-6}
            ev = [{"ph": ph, "cat": "message", "name": "message", "id": i, "pid": r, "tid": 1, "ts": ts} for ph, i, ts in events]
            with open(os.path.join(d, f"rank{r}.json"), "w") as f:
                json.dump({"traceEvents": ev, "optcast": meta}, f)
        return d

    def test_merge_within_bounds(self):
        # Within the bounds (1: +-10, 2: +-20): 1 in [5, 10], 2 in [15, 20]; the midpoints.
        j, summary = self.merged(self.synthetic("bounded", {0: 0, 1: 10, 2: 20, 3: 50}), "bounded.json")
        used = {r["rank"]: r["clock_offset_used_s"] * 1e6 for r in j["optcast"]["ranks"]}
        self.assertAlmostEqual(used[0], 0, places=6)
        self.assertAlmostEqual(used[1], 7.5, places=6)
        self.assertAlmostEqual(used[2], 17.5, places=6)
        self.assertAlmostEqual(used[3], 3, places=6)  # unconstrained: the estimate
        self.assertEqual(j["optcast"]["backwards"], 0)
        self.assertTrue(j["optcast"]["offsets_within_bounds"])
        ts = {(e["pid"], e["id"]): e["ts"] for e in j["traceEvents"]}
        self.assertAlmostEqual(ts[(1, 1)] - ts[(0, 1)], 2.5, places=6)
        self.assertAlmostEqual(ts[(2, 2)] - ts[(1, 2)], 0, places=6)
        # Beyond them (1 within +-2 cannot reach 5): the estimates kept, the message reported.
        j, summary = self.merged(self.synthetic("unbounded", {0: 0, 1: 2, 2: 20, 3: 50}), "unbounded.json")
        self.assertFalse(j["optcast"]["offsets_within_bounds"])
        self.assertEqual([r["clock_offset_used_s"] for r in j["optcast"]["ranks"]], [0, 0, 0, 3e-6])
        self.assertEqual(j["optcast"]["backwards"], 2)
        self.assertIn("the estimates kept", summary)
        self.assertIn("2 messages received before they were sent by up to 10.0 us", summary)

    def test_latency(self):
        # The breakdown's figures recomputed here from the merged file's own slices: each
        # flow's send slice (same rank, same start) gives "send"; each call's span, first
        # rank in to last out, gives "call".
        j, _ = self.merged(self.dir, "for_latency.json")
        path = os.path.join(self.tmp, "for_latency.json")
        out = json.loads(run([TOOL, "trace", "latency", path, "--json"]).stdout)
        ev = j["traceEvents"]
        send_at = {(e["pid"], e["ts"]): e for e in ev if e["ph"] == "X" and e["cat"] == "send"}
        names = {(e["pid"], e["args"]["seq"]): e["name"] for e in ev if e["ph"] == "X" and e["cat"] == "collective"}
        ends = {e["id"] for e in ev if e["ph"] == "f"}
        sends = collections.defaultdict(list)
        for e in ev:
            if e["ph"] == "s" and e["id"] in ends:
                x = send_at[(e["pid"], e["ts"])]
                sends[names.get((x["pid"], x["args"]["seq"]), "(outside a collective)")].append(x["dur"])
        spans = {}
        for e in ev:
            if e["ph"] == "X" and e["cat"] == "collective":
                k = (e["name"], e["args"]["seq"])
                a, b = spans.get(k, (e["ts"], e["ts"] + e["dur"]))
                spans[k] = (min(a, e["ts"]), max(b, e["ts"] + e["dur"]))
        def median(v):
            v = sorted(v)
            return v[int(0.5 * (len(v) - 1) + 0.5)]  # rounded half up, as the tool does
        self.assertEqual(out["messages"], sum(len(v) for v in sends.values()))
        for name in ("broadcast", "allreduce", "scatter"):
            row = out["collectives"][name]
            self.assertEqual(row["send"]["n"], len(sends[name]), name)
            self.assertAlmostEqual(row["send"]["p50_us"], median(sends[name]), places=3)
            calls = [b - a for (n, _), (a, b) in spans.items() if n == name]
            self.assertEqual(row["call"]["n"], len(calls))
            self.assertAlmostEqual(row["call"]["p50_us"], median(calls), places=3)
            self.assertEqual(row["way"]["n"], row["send"]["n"])
            for part in ("send", "way", "held", "call"):
                self.assertLessEqual(row[part]["p10_us"], row[part]["p50_us"])
                self.assertLessEqual(row[part]["p50_us"], row[part]["p90_us"])
            self.assertGreaterEqual(row["held"]["p10_us"], 0)
        text = run([TOOL, "trace", "latency", path]).stdout
        self.assertIn("way (written-has it)", text)
        p = run([TOOL, "trace", "latency", os.path.join(self.dir, "rank0.json")], ok=(2,))
        self.assertIn("not a merged trace", p.stderr)

    def test_merge_refuses(self):
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        p = run([TOOL, "trace", "merge", empty], ok=(2,))
        self.assertIn("no rank<r>.json", p.stderr)
        p = run([TOOL, "trace", "merge", os.path.join(self.tmp, "missing")], ok=(2,))
        self.assertIn("not a directory", p.stderr)
        bad = os.path.join(self.tmp, "bad")
        os.mkdir(bad)
        with open(os.path.join(bad, "rank0.json"), "w") as f:
            f.write('{"traceEvents": [')
        p = run([TOOL, "trace", "merge", bad], ok=(2,))
        self.assertIn("not JSON", p.stderr)

    def test_unwritable_directory(self):
        env = dict(os.environ, OPTCAST_TRACE="/proc/optcast-no-such-dir")
        p = run([BENCH, "coll", "--np", "2", "-o", "bcast", "-l", "8", "-t", "0", "-m", "1", "-r", "1"], ok=(1, 2), env=env)
        self.assertIn("OPTCAST_TRACE='/proc/optcast-no-such-dir'", p.stdout + p.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 2 and not sys.argv[1].startswith("-"):
        TOOL, BENCH = sys.argv.pop(1), sys.argv.pop(1)
    unittest.main()
