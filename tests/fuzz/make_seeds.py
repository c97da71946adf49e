#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/TARGET/): well-formed inputs
that reach every branch of each judgement, for libFuzzer to mutate and for the replay
tests to run. Layouts as in net/tcp/wire_format.hpp and net/bootstrap/store_protocol.hpp.
The protocols' constants are read from those headers, so that a new version makes new
seeds (seeds of an old one stop at the version check and reach nothing behind it).
Run from anywhere: python3 tests/fuzz/make_seeds.py; with --check DIR it writes into DIR
instead and exits 1 if the committed corpus differs (the fuzz_seeds test)."""
import filecmp
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus")
if len(sys.argv) == 3 and sys.argv[1] == "--check":
    OUT = sys.argv[2]
elif len(sys.argv) != 1:
    sys.exit("usage: make_seeds.py [--check DIR]")


def header(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def constant(text, name):
    m = re.search(r"constexpr std::\w+ " + name + r" = (0x[0-9a-fA-F]+|\d+);", text)
    if not m:
        sys.exit("make_seeds.py: no constant " + name)
    return int(m.group(1), 0)


wire_format = header("net/tcp/wire_format.hpp")
HS_MAGIC, HS_VERSION = constant(wire_format, "hs_magic"), constant(wire_format, "hs_version")
FRAME_DATA, FRAME_ABORT = constant(wire_format, "frame_data"), constant(wire_format, "frame_abort")
STORE = re.search(r'protocol = "([^"]+)";', header("net/bootstrap/store.hpp")).group(1).encode()
REJOIN = re.search(r'rejoin_mark = "([^"]+)";', header("net/bootstrap/store_protocol.hpp")).group(1).encode()
CONTROL_VERSION = constant(header("lib/survival/control_wire.cpp"), "version")
JOB = 0x123456789ABCDEF0


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def hello(flags=0, job=JOB, rank=3, size=8, version=HS_VERSION, magic=HS_MAGIC, nonce=b"\0" * 32):
    return struct.pack("<IHHQII", magic, version, flags, job, rank, size) + nonce


def setting(secret, encrypt, size, rank_mod):
    # tcp_hello.cpp: bit 0 secret, bit 1 encrypt, the rest picks size and rank.
    return bytes([(1 if secret else 0) | (2 if encrypt else 0) | ((size - 1) << 2)])


s8 = setting(False, False, 8, 0)
write("tcp_hello", "member", s8 + hello())
write("tcp_hello", "bad_magic", s8 + hello(magic=0x50545448))
write("tcp_hello", "old_version", s8 + hello(version=HS_VERSION - 1))
write("tcp_hello", "other_job", s8 + hello(job=JOB + 1))
write("tcp_hello", "wrong_size", s8 + hello(size=9))
write("tcp_hello", "rank_out_of_range", s8 + hello(rank=8))
write("tcp_hello", "own_rank", s8 + hello(rank=7))
write("tcp_hello", "secret_offered", s8 + hello(flags=1, nonce=bytes(range(32))))
write("tcp_hello", "secret_and_encrypt", setting(True, True, 8, 0) + hello(flags=3, nonce=bytes(range(32))))


def sig(coll=1, alg=2, op=0, typ=0, root=0, blocks=4, elem=1, nbytes=1000, counts=0):
    return struct.pack("<BBBBIIIQQ", coll, alg, op, typ, root, blocks, elem, nbytes, counts)


def frame(kind=FRAME_DATA, flags=0, tag=(5 << 32) | 2, length=1000, signature=None):
    return struct.pack("<IIQQ", kind, flags, tag, length) + (signature if signature is not None else sig())


text = b"rank 2 failed: deadline of collective 5 passed"
write("tcp_frame", "data", b"\x05" + frame())
write("tcp_frame", "data_reduction", b"\x05" + frame(signature=sig(coll=8, op=1, typ=9, elem=4)))
write("tcp_frame", "data_empty_signature", b"\x05" + frame(signature=b"\0" * 32))
write("tcp_frame", "abort", b"\x05" + frame(kind=FRAME_ABORT, tag=11, length=len(text)) + text)
write("tcp_frame", "abort_escapes", b"\x05" + frame(kind=FRAME_ABORT, tag=11, length=6) + b"\x1b[31m\n")
write("tcp_frame", "huge_2_40", b"\x05" + frame(length=1 << 40) + frame(length=(1 << 40) + 1))
write("tcp_frame", "one_gib", b"\x01" + frame(length=1 << 30) + frame(length=1 << 30))
write("tcp_frame", "bad_flags", b"\x05" + frame(flags=1))


def msg(typ, id=0, arg=0, key=b"", val=b""):
    return struct.pack("<IBIIII", 17 + len(key) + len(val), typ, id, arg, len(key), len(val)) + key + val


# net/bootstrap/store_protocol.hpp's `enum type`, from m_hello = 1 on.
_types = re.search(r"enum type : std::uint8_t \{([^}]*)\}", header("net/bootstrap/store_protocol.hpp")).group(1)
_names = [t.split("=")[0].strip() for t in _types.split(",") if t.strip() and "m_last" not in t]
(M_HELLO, M_WELCOME, M_ERROR, M_SET, M_OK, M_GET, M_VALUE, M_BYE, M_PEER_LOST, M_CHALLENGE, M_PROOF, M_FAILED, M_JOB_FAILED, M_FAREWELL,
 M_STALLED, M_PING, M_PONG, M_VERDICT, M_EXCUSE, M_REJOIN, M_REJOINED, M_ADMIT) = (_names.index(n) + 1 for n in (
    "m_hello", "m_welcome", "m_error", "m_set", "m_ok", "m_get", "m_value", "m_bye", "m_peer_lost", "m_challenge", "m_proof", "m_failed",
    "m_job_failed", "m_farewell", "m_stalled", "m_ping", "m_pong", "m_verdict", "m_excuse", "m_rejoin", "m_rejoined", "m_admit"))

write("store_stream", "hello", b"\x01" + msg(M_HELLO, 8, 3, STORE))
write("store_stream", "session", b"\x00" + msg(M_SET, 1, 0, b"addr/3", b"10.0.0.3:4000") + msg(M_GET, 2, 0, b"addr/4") + msg(M_BYE))
write("store_stream", "field_too_long", b"\x01" + msg(M_HELLO, 8, 3, STORE, b"x" * 65))
write("store_stream", "lengths_disagree", b"\x00" + struct.pack("<IBIIII", 17, M_SET, 0, 0, 0xFFFFFFFF, 1))
write("store_stream", "partial", b"\x00" + msg(M_SET, 1, 0, b"k", b"v" * 100)[:60])
write("store_stream", "job_failed", b"\x00" + msg(M_JOB_FAILED, 7, 2, b"", b"rank 2 failed:\x07\x1b"))


def hello_of(what, rank, size, nonce=b"", rejoin=False):
    return bytes([what]) + msg(M_HELLO, size, rank, STORE + (REJOIN if rejoin else b""), nonce)


def from_rank(rank, m):
    return bytes([(2 << 3) | rank]) + m


def closes(rank):
    return bytes([(1 << 3) | rank])


n = 4
joined = b"".join(hello_of(0, r, n) for r in range(n))
write("store_session", "all_bye", bytes([n - 1, 0]) + joined + b"".join(from_rank(r, msg(M_BYE)) for r in range(n)))
write("store_session", "set_get", bytes([n - 1, 0]) + joined + from_rank(1, msg(M_GET, 5, 0, b"k")) + from_rank(2, msg(M_SET, 6, 0, b"k", b"v"))
      + from_rank(3, msg(M_GET, 7, 0, b"k")))
write("store_session", "death_then_report", bytes([n - 1, 0]) + joined + closes(2) + from_rank(1, msg(M_FAILED, 0, 11, b"", b"timeout")) + hello_of(0, 2, n))
write("store_session", "bye_leave_rejoin", bytes([n - 1, 0]) + joined + from_rank(0, msg(M_BYE)) + closes(0) + hello_of(0, 0, n)
      + b"".join(from_rank(r, msg(M_BYE)) for r in range(1, n)))
write("store_session", "stall_answered", bytes([n - 1, 0]) + joined + from_rank(1, msg(M_STALLED, 0, 17, b"", b"waiting for rank 2"))
      + b"".join(from_rank(r, msg(M_PONG, 1)) for r in (0, 2, 3)))
write("store_session", "stall_silent", bytes([n - 1, 0]) + joined + from_rank(1, msg(M_STALLED, 0, 17)) + from_rank(0, msg(M_PONG, 1))
      + from_rank(3, msg(M_STALLED, 0, 17)) + bytes([3 << 3]) + from_rank(2, msg(M_STALLED, 0, 18)))
write("store_session", "secret", bytes([n - 1, 1]) + hello_of(0, 0, n, bytes(32)) + hello_of(0, 1, n) + hello_of(0, 9, n, bytes(32)))
# Survival (shrink, grow): rank 2 dies, the others excuse it (its failure forgotten) and
# end well without it; or a replacement takes its slot (a plain process refused there),
# says rejoin, is admitted, and counts again.
write("store_session", "excused_death", bytes([n - 1, 0]) + joined + closes(2) + from_rank(0, msg(M_EXCUSE, 0, 0, b"", b"2"))
      + b"".join(from_rank(r, msg(M_BYE)) for r in (0, 1, 3)))
write("store_session", "replacement", bytes([n - 1, 0]) + joined + closes(2) + from_rank(1, msg(M_EXCUSE, 0, 0, b"", b"2"))
      + hello_of(0, 2, n) + hello_of(0, 2, n, rejoin=True) + from_rank(2, msg(M_REJOIN)) + from_rank(2, msg(M_ADMIT))
      + b"".join(from_rank(r, msg(M_BYE)) for r in range(n)))
write("store_session", "replacement_dies", bytes([n - 1, 0]) + joined + closes(3) + from_rank(0, msg(M_EXCUSE, 0, 0, b"", b"3"))
      + hello_of(0, 3, n, rejoin=True) + from_rank(3, msg(M_REJOIN)) + closes(3) + hello_of(0, 1, n, rejoin=True)
      + b"".join(from_rank(r, msg(M_BYE)) for r in (0, 1, 2)))
write("store_session", "bad_excuses", bytes([n - 1, 0]) + joined + from_rank(0, msg(M_EXCUSE, 0, 0, b"", b"0")) + from_rank(1, msg(M_EXCUSE, 0, 0, b"", b"2,x"))
      + from_rank(2, msg(M_EXCUSE, 0, 0, b"", b"9")) + from_rank(3, msg(M_ADMIT)) + from_rank(3, msg(M_REJOIN)))
write("store_session", "strangers", bytes([n - 1, 0]) + bytes([0]) + msg(M_SET, 0, 0, b"k", b"v") + hello_of(0, 1, n + 1)
      + bytes([0]) + msg(M_HELLO, n, 1, b"optcast-store/4"))

write("auth_frame", "empty", b"")
write("auth_frame", "frame", bytes(range(32)) + b"\x08label..." + bytes(56) + bytes(16) + b"payload of a frame")
write("auth_frame", "long", bytes(200) + bytes(range(256)) * 4)


# lib/survival/control_wire.hpp: the survival layer's messages, each framed for control.cpp
# by a 2-byte length; rank 1 sends them to ranks 0 and 2 in turn.
def control(kind, comm=0, n=0, ballot=0, code=0, flag=0, words=(), failed=(), text=b""):
    head = b"OC" + bytes([kind, CONTROL_VERSION]) + struct.pack("<IIIIHHHHQ", comm, n, ballot, code, len(words), len(failed), len(text), 0, flag)
    return head + b"".join(struct.pack("<Q", w) for w in words) + b"".join(struct.pack("<Q", f) for f in failed) + text


def framed(*messages):
    return b"".join(struct.pack("<H", len(m)) + m for m in messages)


REVOKE, CONTRIBUTE, DECIDE, ADMIT = 1, 2, 3, 4
write("control", "contribution", framed(control(CONTRIBUTE, flag=1, failed=[0])))
write("control", "decision", framed(control(DECIDE, ballot=1, flag=7, failed=[0b1000])))
write("control", "revocation", framed(control(REVOKE, comm=0, code=12, text=b"rank 1 revoked it")))
write("control", "other_agreement", framed(control(CONTRIBUTE, comm=5, n=3, words=[1, 2]), control(DECIDE, n=9)))
write("control", "garbage", framed(b"OC\x07\x01" + bytes(40), b"not a control message", b""))
write("control", "too_short", framed(control(DECIDE)[:20]))
# Admissions (grow) come to a replacement only: to a member they are nothing, whatever
# they name (the members as bits by job rank in `failed`).
write("control", "admission", framed(control(ADMIT, comm=7, failed=[0b1111])))
write("control", "admission_to_world", framed(control(ADMIT, comm=0, failed=[0b0011])))
write("control", "admission_without_sender", framed(control(ADMIT, comm=9, failed=[0b1101]), control(ADMIT, comm=9, failed=[1 << 63] * 3)))
write("control", "admission_then_decision", framed(control(ADMIT, comm=7, failed=[0b0110]), control(DECIDE, ballot=1, flag=3, failed=[0b0010])))

if OUT != os.path.join(HERE, "corpus"):
    stale = []
    for target in sorted(os.listdir(OUT)):
        made, kept = os.path.join(OUT, target), os.path.join(HERE, "corpus", target)
        names = sorted(os.listdir(made))
        _, differ, missing = filecmp.cmpfiles(made, kept, names, shallow=False)
        stale += [target + "/" + n for n in differ + missing]
    if stale:
        sys.exit("the seed corpus is not what make_seeds.py makes (run it and commit): " + ", ".join(stale))
    print("the seed corpus is what make_seeds.py makes")
