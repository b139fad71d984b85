#!/usr/bin/env python3
"""Writes a seeded mooncake JSONL trace for speed benchmarks: Poisson arrivals, fixed input
and output lengths, hash ids unique per request (no prefix reuse). Timestamps are whole µs.
Usage: gen_bench_trace.py --requests N --rate-per-s R --input 1024 --output 128 --seed S OUT
"""
import argparse
import json
import random

TRACE_BLOCK = 512


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--rate-per-s", type=float, required=True)
    p.add_argument("--input", type=int, default=1024)
    p.add_argument("--output", type=int, default=128)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("out")
    a = p.parse_args()
    rng = random.Random(a.seed)
    ids_per_request = (a.input + TRACE_BLOCK - 1) // TRACE_BLOCK
    t_ms = 0.0
    with open(a.out, "w") as f:
        for i in range(a.requests):
            first = 1 + i * ids_per_request
            row = {"timestamp": round(t_ms, 3), "input_length": a.input, "output_length": a.output,
                   "hash_ids": list(range(first, first + ids_per_request))}
            f.write(json.dumps(row) + "\n")
            t_ms += rng.expovariate(a.rate_per_s) * 1000.0


if __name__ == "__main__":
    main()
