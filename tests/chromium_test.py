#!/usr/bin/python3
"""The pictures as a user sees them: headless Chromium opens a simulated run's SVG
timeline, Karp et al.'s Figure 1 tree, Träff's Table 1 and the HTML viewer of a live
trace (OPTCAST_TRACE on 3 ranks over TCP, merged), and each screenshot must show a
drawing: enough non-white pixels in several colours, and for the viewer, its slices
drawn. Skipped (77) with the reason where Chromium is missing (Debian: chromium).

    tests/chromium_test.py PATH/TO/optcast PATH/TO/optcast-bench
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

TOOL, BENCH = sys.argv[1], sys.argv[2]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def png_pixels(path):
    """(width, height, rows of RGB(A) tuples) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), f"PNG depth {depth} colour type {colour}"
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xff
            elif f == 2:
                line[i] = (line[i] + b) & 0xff
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xff
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xff
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def drawn(path):
    """The share of non-white pixels and the number of distinct colours among them."""
    w, h, bpp, rows = png_pixels(path)
    ink, colours = 0, set()
    for row in rows:
        for x in range(0, w * bpp, bpp):
            px = row[x:x + 3]
            if px != b"\xff\xff\xff":
                ink += 1
                colours.add(bytes(v >> 4 for v in px))
    return ink / (w * h), len(colours)


def screenshot(browser, url, png, size="1200,800"):
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                    f"--window-size={size}", f"--screenshot={png}", url],
                   capture_output=True, timeout=120, check=True)


def main():
    browser = chromium()
    if not browser:
        print("skipped: Chromium is not installed (Debian: apt install chromium)")
        return 77
    tmp = tempfile.mkdtemp(prefix="optcast-chromium-")
    try:
        pages = {}
        karp = ["--collective", "broadcast", "--algorithm", "logp_tree", "--p", "8", "--bytes", "1", "--model", "logp:6,2,4"]
        subprocess.run([TOOL, "simulate", *karp, "--svg", f"{tmp}/timeline.svg", "--tree-svg", f"{tmp}/tree.svg"],
                       check=True, capture_output=True)
        subprocess.run([TOOL, "schedule", "--p", "17", "--svg", f"{tmp}/table.svg"], check=True, capture_output=True)
        env = dict(os.environ, OPTCAST_TRACE=f"{tmp}/trace")
        subprocess.run([BENCH, "coll", "--np", "3", "-o", "bcast,allreduce", "-l", "65536", "-t", "0", "-m", "2", "-r", "2"],
                       check=True, capture_output=True, env=env, timeout=300)
        subprocess.run([TOOL, "trace", "merge", f"{tmp}/trace", "-o", f"{tmp}/trace.json", "--html", f"{tmp}/trace.html"],
                       check=True, capture_output=True)
        for name in ("timeline.svg", "tree.svg", "table.svg", "trace.html"):
            png = f"{tmp}/{name}.png"
            screenshot(browser, "file://" + f"{tmp}/{name}", png)
            share, colours = drawn(png)
            print(f"{name}: {share:.1%} of the screenshot drawn, {colours} colours")
            pages[name] = (share, colours)
        # A blank or error page is all white, or nearly; each picture has bars or cells in
        # several block colours.
        bad = [n for n, (share, colours) in pages.items() if share < 0.01 or colours < 4]
        if bad:
            print("FAILED: blank or nearly blank:", ", ".join(bad))
            return 1
        # The viewer's script ran (a page whose script failed shows only its empty canvas):
        # its drawing is more than the axis and labels.
        if pages["trace.html"][0] < 0.02:
            print("FAILED: the trace viewer drew next to nothing")
            return 1
        print("every picture drawn")
        return 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
