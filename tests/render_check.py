#!/usr/bin/env python3
"""Checks a sandglass HTML report as headless Chromium rendered it (standard library only).

    render_check.py check NAME KIND DOM PNG...  check the DOM that `chromium --dump-dom` printed
                                                for the page NAME of KIND (timer, noise,
                                                hourglass, study) and its screenshots
    render_check.py crop PNG OUT                write PNG without its trailing blank rows to
                                                OUT; prints "CONTENT_HEIGHT IMAGE_HEIGHT"
    render_check.py selftest                    decode PNGs of both colour types written with
                                                all five filter types

`check` relies on the page structure that `sandglass report --html` promises (docs/report.md):
- the root is <html data-sandglass-kind="KIND">;
- each plot is <figure class="plot" data-plot="NAME"> with a <figcaption> and exactly one
  <svg viewBox=... width="100%">, or, when it has nothing to draw, data-empty="REASON";
- inside the svg, data is drawn by path, polyline, rect, circle or line elements whose class
  starts with the word `d`;
- the axis titles are <text class="axis-title x"> and <text class="axis-title y"> and end with
  a unit in parentheses, "lateness (µs)"; the y titles of the timelines name rows instead.
The page must load nothing: no <script>, no src or href (other than a link) to another file.
Every plot expected for KIND must be there with data; another plot that is present must follow
the same rules, but may be empty. Each PNG must be at least 390 px wide and not blank: at least
1% of the pixels above its trailing blank rows differ from the top-left pixel.

Prints one line per plot and image and a summary; exits 1 on any failure, naming the file, the
plot and what is wrong. Run by tests/render.sh.
"""
import re
import struct
import sys
import zlib
from html.parser import HTMLParser
from functools import lru_cache
from itertools import accumulate

EXPECTED = {
    "timer": ["latency-histogram", "exceedance", "lateness-over-time", "interarrival"],
    "noise": ["noise-histogram", "exceedance", "noise-timeline"],
    "hourglass": ["execution-timeline"],
    "study": ["latency-histogram", "exceedance", "mttf"],
}
ROW_TITLE_PLOTS = {"execution-timeline", "noise-timeline"}  # y axis: threads or CPUs
DATA_TAGS = {"path", "polyline", "rect", "circle", "line"}
UNIT = re.compile(r"\S\s\([^()]+\)$")  # "lateness (µs)"
MIN_WIDTH = 390
MIN_MARKED = 0.01


# ---------------------------------------------------------------- the DOM


class Plot:
    def __init__(self, name, empty):
        self.name, self.empty = name, empty
        self.svgs = []  # attributes of each <svg>
        self.captions = 0
        self.marks = 0
        self.titles = {"x": [], "y": []}


class ReportParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.kind = None
        self.plots = []
        self.plot = None
        self.figure_depth = 0  # figures open inside the current plot, itself included
        self.svg_depth = 0
        self.title = None  # (axis, [text]) while inside an axis title
        self.fetches = []  # what would load a script or another file

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "html" and self.kind is None:
            self.kind = a.get("data-sandglass-kind")
        if tag == "script":
            self.fetches.append("<script>")
        for attr in ("src", "href") if tag != "a" else ():
            if a.get(attr) and not a[attr].startswith(("#", "data:")):
                self.fetches.append(f'<{tag} {attr}="{a[attr]}">')
        if tag == "figure":
            if self.plot is not None:
                self.figure_depth += 1
            elif "plot" in classes:
                self.plot = Plot(a.get("data-plot") or "(unnamed)", a.get("data-empty"))
                self.plots.append(self.plot)
                self.figure_depth = 1
            return
        p = self.plot
        if p is None:
            return
        if tag == "figcaption":
            p.captions += 1
        elif tag == "svg":
            if self.svg_depth == 0:
                p.svgs.append(a)
            self.svg_depth += 1
        elif self.svg_depth:
            if tag in DATA_TAGS and classes[:1] == ["d"]:
                p.marks += 1
            elif tag == "text" and "axis-title" in classes:
                axis = "x" if "x" in classes else "y" if "y" in classes else None
                if axis:
                    self.title = (axis, [])

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag in ("svg", "figure", "text"):
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if self.plot is None:
            return
        if tag == "figure":
            self.figure_depth -= 1
            if self.figure_depth == 0:
                self.plot = None
        elif tag == "svg" and self.svg_depth:
            self.svg_depth -= 1
        elif tag == "text" and self.title:
            axis, text = self.title
            self.plot.titles[axis].append(" ".join("".join(text).split()))
            self.title = None

    def handle_data(self, data):
        if self.title:
            self.title[1].append(data)


def plot_problems(p):
    """What is wrong with a plot that has data to show, as a list of phrases."""
    problems = []
    if not p.captions:
        problems.append("no <figcaption>")
    if len(p.svgs) != 1:
        problems.append(f"{len(p.svgs)} <svg> elements instead of one")
    for svg in p.svgs[:1]:
        if not svg.get("viewbox"):
            problems.append("<svg> without viewBox")
        if svg.get("width") != "100%":
            problems.append(f'<svg> width is {svg.get("width")!r}, not "100%"')
    if not p.marks:
        problems.append('no data element (path, polyline, rect, circle or line of class "d")')
    for axis in "xy":
        titles = p.titles[axis]
        if not titles:
            problems.append(f'no axis title <text class="axis-title {axis}">')
        elif not (axis == "y" and p.name in ROW_TITLE_PLOTS):
            problems += [f"{axis} axis title {t!r} names no unit in parentheses"
                         for t in titles if not UNIT.search(t)]
    return problems


def check_dom(label, kind, text):
    """Prints a line per plot; returns the failure lines."""
    parser = ReportParser()
    parser.feed(text)
    parser.close()
    fails = []
    if parser.kind != kind:
        fails.append(f"{label}: data-sandglass-kind is {parser.kind!r}, expected {kind!r}")
    fails += [f"{label}: not self-contained: {what}" for what in parser.fetches]
    expected = EXPECTED.get(kind, [])
    names = [p.name for p in parser.plots]
    for name in expected:
        if name not in names:
            fails.append(f'{label}: {kind} {name}: missing (no <figure class="plot" data-plot="{name}">)')
    for p in parser.plots:
        if p.empty is not None:
            if p.name in expected:
                fails.append(f"{label}: {kind} {p.name}: empty: {p.empty}")
            else:
                print(f"note {kind} {p.name}: empty (not required): {p.empty}")
            continue
        problems = plot_problems(p)
        fails += [f"{label}: {kind} {p.name}: {what}" for what in problems]
        if not problems:
            print(f"ok {kind} {p.name}: {p.marks} marks")
    return fails, len(parser.plots)


# ---------------------------------------------------------------- PNG


def read_png(path):
    """Returns (width, height, bytes per pixel, filtered scanlines, chunks other than IDAT/IEND)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, chunks = 8, [], []
    while pos < len(data):
        length, ctype = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if ctype == b"IDAT":
            idat.append(body)
        elif ctype == b"IEND":
            break
        else:
            chunks.append((ctype, body))
    if not chunks or chunks[0][0] != b"IHDR":
        raise ValueError("no IHDR chunk")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: bit depth {depth}, colour type {colour}, interlace {interlace}")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp + 1
    if len(raw) < stride * height:
        raise ValueError("truncated image data")
    return width, height, bpp, raw[:stride * height], chunks


@lru_cache(maxsize=8)
def masks(n):
    return int.from_bytes(b"\x7f" * n, "little"), int.from_bytes(b"\x80" * n, "little")


def add_bytes(a, b):
    """Bytewise (a + b) mod 256 of two equally long byte strings, without a Python loop."""
    n = len(a)
    x, y = int.from_bytes(a, "little"), int.from_bytes(b, "little")
    low, high = masks(n)
    return (((x & low) + (y & low)) ^ ((x ^ y) & high)).to_bytes(n, "little")


def unfilter(ftype, line, prior, bpp):
    """One reconstructed scanline (PNG spec, section 9)."""
    n = len(line)
    if ftype == 0:
        return bytes(line)
    if ftype == 2:
        return add_bytes(line, prior)
    if ftype == 1 or (ftype == 4 and not any(prior)):  # Paeth over a zero row is Sub
        out = bytearray(n)
        for c in range(bpp):
            out[c::bpp] = bytes(map((255).__and__, accumulate(line[c::bpp])))
        return bytes(out)
    out = bytearray(line)
    if ftype == 3:
        for i in range(n):
            left = out[i - bpp] if i >= bpp else 0
            out[i] = (out[i] + ((left + prior[i]) >> 1)) & 255
    elif ftype == 4:
        for i in range(n):
            if i >= bpp:
                a, c = out[i - bpp], prior[i - bpp]
            else:
                a = c = 0
            b = prior[i]
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    else:
        raise ValueError(f"unknown PNG filter type {ftype}")
    return bytes(out)


def decode_png(path):
    """Returns (width, height, rows of RGB(A) bytes, filtered scanlines, other chunks, bpp)."""
    width, height, bpp, raw, chunks = read_png(path)
    stride = width * bpp + 1
    rows, prior = [], bytes(width * bpp)
    for y in range(height):
        start = y * stride
        prior = unfilter(raw[start], raw[start + 1:start + stride], prior, bpp)
        rows.append(prior)
    return width, height, rows, raw, chunks, bpp


def content_height(rows, bpp):
    """The height without the trailing rows that repeat a uniform last row."""
    last = rows[-1]
    if last != last[:bpp] * (len(last) // bpp):
        return len(rows)  # the content reaches the bottom edge
    h = len(rows)
    while h > 1 and rows[h - 1] == last:
        h -= 1
    return h


def pixels(row, bpp):
    """The row's pixels as ints (RGB padded to four bytes)."""
    if bpp == 3:
        wide = bytearray(len(row) // 3 * 4)
        for c in range(3):
            wide[c::4] = row[c::3]
        row = wide
    return memoryview(bytes(row)).cast("I").tolist()


def check_png(label, path):
    """Prints a line for the image; returns the failure lines."""
    try:
        width, _, rows, _, _, bpp = decode_png(path)
    except (OSError, ValueError, zlib.error) as e:
        return [f"{label}: {path}: cannot decode: {e}"]
    h = content_height(rows, bpp)
    background = rows[0][:bpp]
    blank = background * width
    bg = pixels(background, bpp)[0]
    marked = sum(width - pixels(row, bpp).count(bg) for row in rows[:h] if row != blank)
    share = marked / (width * h)
    name = path.rsplit("/", 1)[-1]
    fails = []
    if width < MIN_WIDTH:
        fails.append(f"{label}: {name}: {width} px wide, less than {MIN_WIDTH}")
    if share < MIN_MARKED:
        fails.append(f"{label}: {name}: blank: {share:.2%} of {width}x{h} px differ from the background")
    if not fails:
        print(f"ok image {name}: {width}x{h} px, {share:.1%} drawn")
    return fails


def crop(path, out):
    """Writes PNG without its trailing blank rows; returns (content height, image height)."""
    width, height, rows, raw, chunks, bpp = decode_png(path)
    h = content_height(rows, bpp)
    ihdr = struct.pack(">II", width, h) + chunks[0][1][8:]
    body = [(b"IHDR", ihdr)] + chunks[1:] + [(b"IDAT", zlib.compress(raw[:h * (width * bpp + 1)], 6)), (b"IEND", b"")]
    with open(out, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        for ctype, data in body:
            f.write(struct.pack(">I", len(data)) + ctype + data)
            f.write(struct.pack(">I", zlib.crc32(ctype + data)))
    return h, height


def write_png(path, width, rows, bpp, ftypes):
    """Writes rows of RGB(A) bytes, filtering row y with ftypes[y % len(ftypes)] (for selftest)."""
    lines, prior = [], bytes(width * bpp)
    for y, row in enumerate(rows):
        ftype, out = ftypes[y % len(ftypes)], bytearray()
        for i, x in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prior[i], prior[i - bpp] if i >= bpp else 0
            p = a + b - c
            paeth = min((abs(p - a), 0, a), (abs(p - b), 1, b), (abs(p - c), 2, c))[2]
            out.append((x - [0, a, b, (a + b) // 2, paeth][ftype]) % 256)
        lines.append(bytes([ftype]) + bytes(out))
        prior = row
    ihdr = struct.pack(">IIBBBBB", width, len(rows), 8, 2 if bpp == 3 else 6, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        for ctype, data in ((b"IHDR", ihdr), (b"IDAT", zlib.compress(b"".join(lines))), (b"IEND", b"")):
            f.write(struct.pack(">I", len(data)) + ctype + data + struct.pack(">I", zlib.crc32(ctype + data)))


def selftest():
    import random
    import tempfile
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        for bpp in (3, 4):
            width = 7
            rows = [bytes(rng.choice((0, 1, 127, 128, 254, 255, rng.randrange(256)))
                          for _ in range(width * bpp)) for _ in range(23)]
            rows[5] = bytes(width * bpp)  # a zero row: Paeth below it acts as Sub
            for ftypes in ([0], [1], [2], [3], [4], [0, 1, 2, 3, 4], [4, 3, 2, 1, 0, 4, 4]):
                path = f"{tmp}/t.png"
                write_png(path, width, rows, bpp, ftypes)
                got = decode_png(path)
                assert got[0] == width and got[1] == len(rows), (bpp, ftypes, got[:2])
                assert got[2] == rows, f"colour type {2 if bpp == 3 else 6}, filters {ftypes}: decoded rows differ"
    print("ok PNG decoder: colour types 2 and 6, filter types 0-4")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "check":
        name, kind, dom, images = argv[1], argv[2], argv[3], argv[4:]
        if kind not in EXPECTED:
            sys.exit(f"unknown kind {kind!r}: one of {', '.join(EXPECTED)}")
        with open(dom, encoding="utf-8") as f:
            fails, plots = check_dom(name, kind, f.read())
        for image in images:
            fails += check_png(name, image)
        for line in fails:
            print(f"FAIL {line}")
        print(f"{name}: {kind}, {plots} plots, {len(images)} images: "
              + (f"{len(fails)} failures" if fails else "ok"))
        return 1 if fails else 0
    if len(argv) == 3 and argv[0] == "crop":
        print(*crop(argv[1], argv[2]))
        return 0
    if argv == ["selftest"]:
        return selftest()
    sys.exit(__doc__.split("\n\n")[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
