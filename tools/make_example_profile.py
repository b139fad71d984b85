#!/usr/bin/env python3
"""Writes routersim's example timing profile, a mocker-format NPZ (Dynamo's
`--planner-profile-data` layout), with the Python standard library only (numpy can read it:
`numpy.load(path)`).

The numbers are illustrative, not a measurement: they are shaped like an 8B-class model on one
H100 (prefill about 17 ms for a 512-token prompt and 200 ms for 8192 tokens; a decode step from
4.5 ms on an empty pool to about 25 ms with a million KV tokens of long contexts). Replace the
file with your own profile (docs/calibration.md) before trusting absolute numbers.

Keys, all float64:
  prefill_isl, prefill_ttft_ms             1-D, prefill time (ms) over a pass's new tokens
  decode_active_kv_tokens                  1-D, grid rows: total KV tokens of the decode batch
  decode_context_length                    1-D, grid columns: mean context length
  decode_itl                               2-D (rows x columns), decode step time (ms)

Usage: python3 tools/make_example_profile.py [--narrow] [OUT.npz]
       (default scenarios/profiles/example-h100.npz; the output is byte-for-byte reproducible)
  --narrow writes the same model on short axes (prefill 300..900 tokens, KV 1000..2000,
  context 400..800) with a sloped, non-planar decode grid: the fidelity fixture
  tests/fixtures/fidelity/profile-memory-pressure uses it, so that 1.6.1's extrapolation
  beyond both ends of every axis is compared too.
"""
import struct
import sys
import zipfile

PREFILL_ISL = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
DECODE_KV = [0, 16384, 65536, 262144, 1048576]
DECODE_CTX = [128, 512, 2048, 8192, 32768]


def prefill_ms(tokens):
    return 6.0 + 0.022 * tokens + 1.6e-7 * tokens * tokens


def decode_ms(kv_tokens, context_length):
    return 4.5 + 1.5e-5 * kv_tokens + 1.0e-4 * context_length


def npy(values, shape):
    """One float64 .npy file (format 1.0, C order), as numpy.save writes it."""
    dims = "(%d,)" % shape[0] if len(shape) == 1 else "(%s)" % ", ".join(str(d) for d in shape)
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % dims
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = header + " " * pad + "\n"
    body = b"".join(struct.pack("<d", float(v)) for v in values)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + body


def write_npz(path, arrays):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, (values, shape) in arrays.items():
            # A fixed timestamp keeps the archive byte-for-byte reproducible.
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            archive.writestr(info, npy(values, shape))


def main():
    args = sys.argv[1:]
    narrow = "--narrow" in args
    args = [a for a in args if a != "--narrow"]
    out = args[0] if args else "scenarios/profiles/example-h100.npz"
    isl, kvs, ctxs = PREFILL_ISL, DECODE_KV, DECODE_CTX
    itl = [decode_ms(kv, ctx) for kv in kvs for ctx in ctxs]
    if narrow:
        isl, kvs, ctxs = [300, 600, 900], [1000, 2000], [400, 800]
        # A saddle term makes the grid non-planar, so bilinear differs from planar.
        itl = [decode_ms(kv, ctx) + 1e-6 * (kv - 1500) * (ctx - 600) for kv in kvs for ctx in ctxs]
    write_npz(out, {
        "prefill_isl": (isl, [len(isl)]),
        "prefill_ttft_ms": ([prefill_ms(t) for t in isl], [len(isl)]),
        "decode_active_kv_tokens": (kvs, [len(kvs)]),
        "decode_context_length": (ctxs, [len(ctxs)]),
        "decode_itl": (itl, [len(kvs), len(ctxs)]),
    })
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
