#!/usr/bin/env python3
"""Checks that a PNG screenshot is not blank: enough non-white pixels and several colours.

Standard library only (zlib + struct): decodes 8-bit RGB/RGBA non-interlaced PNGs, which is
what Chromium writes. Usage: planning_png_check.py shot.png
"""
import struct
import sys
import zlib


def pixels(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError("unsupported PNG layout")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    prev = bytearray(stride)
    out = []
    i = 0
    for _ in range(height):
        kind = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append(bytes(line))
        prev = line
    return width, height, channels, out


def main():
    width, height, channels, rows = pixels(sys.argv[1])
    colours = set()
    non_white = 0
    for row in rows:
        for x in range(0, width * channels, channels):
            rgb = row[x:x + 3]
            colours.add(rgb)
            if rgb != b"\xff\xff\xff":
                non_white += 1
    share = non_white / float(width * height)
    print("%s: %dx%d, %d colours, %.1f%% non-white" % (sys.argv[1], width, height, len(colours), 100 * share))
    return 0 if len(colours) >= 8 and share >= 0.005 else 1


if __name__ == "__main__":
    sys.exit(main())
