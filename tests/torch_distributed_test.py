#!/usr/bin/python3
"""PyTorch's own distributed tests (torch.testing._internal.distributed.distributed_test,
Debian's libtorch-test) against backend "optcast", the way PyTorch's
test/distributed/test_distributed_spawn.py runs them against Gloo: every test starts
WORLD_SIZE processes, each initialises the backend through a file:// store and runs it.

The ranks are forked from this driver (as torch's own test_distributed_fork.py did),
not spawned: a spawned rank imports torch again, about 3.5 s of CPU, which made the
307 tests take 1003 s here; forked, they take about 50 s, with the same 87 run and 220
skipped. OPTCAST_DT_START=spawn starts them the spawned way.

    tests/torch_distributed_test.py [--np N] [--features] [--min-passed K] [--shards S] [unittest options, -k PATTERN]

--min-passed K fails the run when fewer than K tests passed, though none failed: were
torch's skip rules to change so that the suite skipped everything, it would not pass.

--shards S runs the tests in S drivers at once, each every S-th test (and its own
TEMP_DIR): the ranks of one test spend much of it waiting (for their peers to start and
join, for torch's barriers), so two drivers finish in little more than half the time
(35 s against 59, alone here, 2026-12-07: the same 87 tests passed) for the CPU of one more
import of torch. K counts the tests passed in all of them.

--features declares optcast among the backends torch's tests trust with sub-groups and
DDP (DistTestCases.backend_feature), so that those tests run instead of skipping as they
do for any plugin backend.

Shims, for Debian's torch 1.13 on Python 3.11 (run with /usr/bin/python3):
  * `expecttest` (imported by torch's common_utils for its TestCase base; not packaged in
    Debian): a stand-in whose TestCase is unittest's, ACCEPT false (no test here uses
    assertExpectedInline);
  * torch.distributed._shard does not import on Python 3.11 (a dataclass field with a
    mutable default, refused since 3.11), and the suite's ranks switch DDP to its
    experimental ReplicatedTensor path, which imports it: the switch is kept off here, so
    DDP runs its ordinary path (the one users get).
Exits 77 (skipped) with the reason where torch, its tests or optcast_torch are missing.
"""
import os
import sys
import tempfile
import types
import unittest

expecttest = types.ModuleType("expecttest")
expecttest.ACCEPT = False
expecttest.TestCase = unittest.TestCase
sys.modules.setdefault("expecttest", expecttest)


def arg_value(name, default):
    if name in sys.argv:
        i = sys.argv.index(name)
        value = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return value
    return default


# The spawned ranks import this file again (as __mp_main__) with the environment set here.
if __name__ == "__main__":
    os.environ["WORLD_SIZE"] = arg_value("--np", os.environ.get("WORLD_SIZE", "2"))
    if "--features" in sys.argv:
        sys.argv.remove("--features")
        os.environ["OPTCAST_TORCH_FEATURES"] = "1"
    MIN_PASSED = int(arg_value("--min-passed", "0"))
    SHARDS = int(arg_value("--shards", "1"))
    if SHARDS < 1:
        sys.exit("--shards: need at least 1")
    if SHARDS == 1:
        os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="optcast-dt-"))


def run_shards(n):
    """The shards as drivers of their own, at once; their passed tests added up."""
    import shutil
    import subprocess
    counts = tempfile.mkdtemp(prefix="optcast-dt-passed-")
    procs = []
    for i in range(n):
        env = dict(os.environ, OPTCAST_DT_SHARD=f"{i}/{n}", TEMP_DIR=tempfile.mkdtemp(prefix=f"optcast-dt-{i}-"),
                   OPTCAST_DT_PASSED=os.path.join(counts, str(i)))
        procs.append((subprocess.Popen([sys.executable, __file__] + sys.argv[1:], env=env), env["OPTCAST_DT_PASSED"]))
    failed, total = False, 0
    for p, passed_file in procs:
        failed |= p.wait() != 0
        try:
            with open(passed_file) as f:
                total += int(f.read())
        except (OSError, ValueError):
            failed = True
    shutil.rmtree(counts, ignore_errors=True)
    if failed:
        print("a shard failed (its output above)", file=sys.stderr)
        sys.exit(1)
    if total < MIN_PASSED:
        print(f"only {total} tests passed, fewer than --min-passed {MIN_PASSED}: did torch's skip rules change?", file=sys.stderr)
        sys.exit(1)
    print(f"{total} tests passed in {n} shards", file=sys.stderr)
    sys.exit(0)


if __name__ == "__main__" and SHARDS > 1:
    # Before torch is imported here: the shards import it themselves (3.5 s of CPU each).
    import importlib.util
    for module, why in (("torch", "torch is missing (Debian: python3-torch, libtorch-test)"),
                        ("optcast_torch", "optcast_torch was not built")):
        if importlib.util.find_spec(module) is None:
            print(f"skipped: {why}")
            sys.exit(77)
    run_shards(SHARDS)

os.environ["BACKEND"] = "optcast"
# With CI set, torch's helpers write XML reports through xmlrunner, which Debian does not
# package; this runner reports by its exit status.
os.environ.pop("CI", None)
os.environ.setdefault("OPTCAST_LOG", "error")

try:
    import torch  # noqa: F401
    from torch.testing._internal.common_distributed import DistTestCases
except ImportError as e:
    print(f"skipped: torch or its test helpers are missing ({e}; Debian: python3-torch, libtorch-test)")
    sys.exit(77)
try:
    import optcast_torch  # noqa: F401  (registers backend "optcast")
except ImportError as e:
    if __name__ != "__main__":
        # A spawned rank: the driver imported the module, so this is a failure (e.g. the
        # library rebuilt under a running test), never a skip.
        raise
    print(f"skipped: optcast_torch was not built ({e})")
    sys.exit(77)

if os.environ.get("OPTCAST_TORCH_FEATURES") == "1":
    for feature in ("subgroup", "ddp"):
        DistTestCases.backend_feature[feature].add("optcast")

import torch.nn.parallel._replicated_tensor_ddp_utils as replicated  # noqa: E402

replicated._set_ddp_with_replicated_tensor = lambda value: None

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


def start_ranks(test):
    # The driver only imports and runs unittest: no thread or backend state of its own
    # for a forked rank to inherit.
    if os.environ.get("OPTCAST_DT_START") == "spawn":
        test._spawn_processes()
    else:
        test._start_processes(torch.multiprocessing.get_context("fork").Process)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        start_ranks(self)


# torch's collective tests that run only for the backends they name (Gloo's, MPI's), their
# skip marks left behind: the same test bodies, on optcast. Not Gloo's monitored barrier
# (a Gloo feature, not a collective) nor tests that need CUDA.
UNGATED = """
    all_reduce_coalesced_sum all_reduce_coalesced_product all_reduce_coalesced_min all_reduce_coalesced_max
    all_reduce_coalesced_group_sum all_reduce_coalesced_group_product all_reduce_coalesced_group_min
    all_reduce_coalesced_group_max all_reduce_coalesced_full_group_sum all_reduce_coalesced_full_group_product
    all_reduce_coalesced_full_group_min all_reduce_coalesced_full_group_max scatter_object_list
    all_to_all_single_equal_split all_to_all_single_equal_split_complex all_to_all_single_unequal_split
    all_to_all_single_unequal_split_complex all_to_all_single_equal_split_group all_to_all_single_unequal_split_group
    all_to_all_single_equal_split_full_group all_to_all_single_unequal_split_full_group
    all_to_all all_to_all_complex all_to_all_group all_to_all_full_group
    get_future gather_object gather_object_subgroup
""".split()


def ungated(name):
    body = getattr(DistributedTest._DistTestBase, "test_" + name)

    def test(self):
        return body(self)
    test.__name__ = "test_" + name
    return test


class TestOptcastUngated(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        start_ranks(self)


for _name in dir(TestOptcastUngated):  # only the ungated tests in this class
    if _name.startswith("test_"):
        setattr(TestOptcastUngated, _name, None)
for _name in UNGATED:
    setattr(TestOptcastUngated, "test_" + _name, ungated(_name))


def load_tests(loader, tests, pattern):
    """unittest's hook: a shard (OPTCAST_DT_SHARD=i/S) keeps every S-th test from the i-th."""
    shard = os.environ.get("OPTCAST_DT_SHARD")
    if not shard:
        return tests
    i, n = (int(x) for x in shard.split("/"))

    def flat(suite):
        for t in suite:
            yield from (flat(t) if isinstance(t, unittest.TestSuite) else (t,))
    return unittest.TestSuite(t for j, t in enumerate(flat(tests)) if j % n == i)



if __name__ == "__main__":
    passed = []
    count_success = unittest.TestResult.addSuccess

    def counted(result, test):
        passed.append(test.id())
        return count_success(result, test)

    unittest.TestResult.addSuccess = counted
    try:
        run_tests()
    except SystemExit as e:
        if os.environ.get("OPTCAST_DT_PASSED"):  # a shard: the driver that started it counts
            with open(os.environ["OPTCAST_DT_PASSED"], "w") as f:
                f.write(str(len(passed)))
            raise
        if e.code in (0, None) and len(passed) < MIN_PASSED:
            print(f"only {len(passed)} tests passed, fewer than --min-passed {MIN_PASSED}: "
                  "did torch's skip rules change?", file=sys.stderr)
            sys.exit(1)
        print(f"{len(passed)} tests passed", file=sys.stderr)
        raise
