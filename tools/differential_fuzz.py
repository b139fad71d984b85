#!/usr/bin/env python3
"""Differential check of tools/dynamo_model.py against Dynamo 1.6.1: builds small random
one-worker cases (seeded: random engine limits, tiny KV pools that force preemption, prefix
groups, random policy-class YAMLs with FCFS/WSPT, thresholds, priorities), runs Dynamo
(through tools/dynamo-replay) on each and compares every row with the model. Used to validate
docs/fidelity-notes.md; the same cases can be pointed at routersim's replay later (each case
dir holds trace.jsonl, engine.json, policy.yaml and Dynamo's dynamo.csv).
Usage: differential_fuzz.py OUT_DIR FIRST_SEED COUNT [--no-policy]
"""
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# DYNAMO_REPLAY names another driver with the same flags.
DYNAMO_REPLAY = os.environ.get("DYNAMO_REPLAY", os.path.join(HERE, "dynamo-replay"))


def random_policy(rng):
    families = ["fa", "fb", "fc"][: rng.randint(1, 3)]
    bounds = [0] + ([rng.choice([256, 1024, 3000])] if rng.random() < 0.5 else [])
    lines = [f"default_policy_family: {families[0]}", "uncached_isl_buckets:"]
    for i, m in enumerate(bounds):
        lines += [f"  - min_tokens: {m}", f"    bucket: b{i}"]
    lines.append("policy_classes:")
    for f in families:
        for i in range(len(bounds)):
            lines += [f"  - name: {f}_b{i}", f"    policy_family: {f}", f"    cache_bucket: b{i}",
                      f"    queue_policy: {rng.choice(['fcfs', 'wspt'])}",
                      f"    quantum: {rng.choice([1, 64, 256, 512, 2048, 5000])}"]
            u = rng.random()
            if u < 0.6:
                lines.append(f"    prefill_busy_threshold: {rng.choice([0, 512, 1536, 4096])}")
            elif u < 0.85:
                lines.append(f"    prefill_busy_threshold_frac: {rng.choice([0.0, 0.1, 0.25, 0.5])}")
    if rng.random() < 0.4:
        lines += ["  - name: vip", f"    quantum: {rng.choice([128, 4096])}",
                  f"    prefill_busy_threshold: {rng.choice([0, 2048])}"]
    return "\n".join(lines) + "\n", families + ["vip", "", "zzz"]


def build_case(seed, with_policy):
    rng = random.Random(seed)
    num_blocks = rng.choice([40, 64, 100, 200, 16384])
    engine = {"backend": "vllm", "worker_type": "aggregated", "num_gpu_blocks": num_blocks,
              "max_num_batched_tokens": rng.choice([256, 1024, 2048, 8192]),
              "max_num_seqs": rng.choice([2, 4, 8, 16, 256]),
              "enable_prefix_caching": rng.random() < 0.7,
              "preemption_mode": "lifo" if rng.random() < 0.7 else "fifo"}
    policy, names = random_policy(rng) if with_policy else (None, [""])
    shared = [[800_000 + 10 * g + j for j in range(8)] for g in range(3)]
    rows, t_ms = [], 0.0
    for i in range(rng.randint(3, 40)):
        isl = rng.randint(1, min(4000, num_blocks * 64 // 3))
        osl = rng.randint(0 if rng.random() < 0.05 else 1, rng.choice([2, 50, 300]))
        n = (isl + 511) // 512
        own = [seed * 100_000 + i * 10 + j for j in range(n)]
        ids = (rng.choice(shared) + own)[:n] if rng.random() < 0.4 else own
        row = {"timestamp": round(t_ms, 3), "input_length": isl, "output_length": osl, "hash_ids": ids}
        cls = rng.choice(names)
        if cls:
            row["policy_class"] = cls
        if with_policy and rng.random() < 0.2:
            row["priority"] = rng.randint(-2, 3)
        if with_policy and rng.random() < 0.1:
            row["strict_priority"] = rng.randint(0, 2)
        rows.append(row)
        t_ms += rng.expovariate(rng.choice([10, 40, 100])) * 1000.0
    return {"engine": engine}, policy, rows


def main():
    out, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with_policy = "--no-policy" not in sys.argv
    failing = 0
    for seed in range(first, first + count):
        engine, policy, rows = build_case(seed, with_policy)
        d = os.path.join(out, str(seed))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "trace.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        json.dump(engine, open(os.path.join(d, "engine.json"), "w"))
        args = [DYNAMO_REPLAY, "--trace", f"{d}/trace.jsonl", "--engine", f"{d}/engine.json", "--out", f"{d}/dynamo.csv"]
        if policy:
            open(os.path.join(d, "policy.yaml"), "w").write(policy)
            args += ["--policy", f"{d}/policy.yaml"]
        run = subprocess.run(args, capture_output=True, text=True)
        if run.returncode:
            print(seed, "dynamo-replay failed:", (run.stderr.strip().splitlines() or ["?"])[-1][:120])
            continue
        check = subprocess.run([sys.executable, os.path.join(HERE, "dynamo_model.py"), d],
                               capture_output=True, text=True)
        print(seed, json.dumps(engine["engine"]), check.stdout.strip() or check.stderr.strip()[-200:])
        failing += check.returncode != 0
    print("failing cases:", failing)
    sys.exit(1 if failing else 0)


if __name__ == "__main__":
    main()
