#!/usr/bin/env python3
"""Generates the inputs of the fidelity fixtures (tests/fixtures/fidelity/<name>/: trace.jsonl,
policy.yaml, engine.json) deterministically from fixed seeds, so the fixtures can be rebuilt
and audited. Dynamo's outputs (dynamo.csv, dynamo.trace.jsonl) come from
tools/run_fidelity_fixtures.sh, which runs tools/dynamo-replay on these inputs.

Timestamps are whole microseconds and start at 0 (Dynamo rebases arrivals to the minimum
timestamp, and tools/dynamo-replay adds row_index ns, so tagged times stay on the ns grid).
A fixture replayed in one of Dynamo's other replay modes (closed loop, arrival speed-up) has a
replay_args.txt: the extra flags, on one line, that both tools/dynamo-replay and `routersim replay`
get.
Usage: gen_fidelity_traces.py OUT_ROOT   (writes OUT_ROOT/<fixture>/...)
"""
import json
import os
import random
import sys

BLOCK = 512  # trace block size: tokens per hash id


def hash_count(tokens):
    return (tokens + BLOCK - 1) // BLOCK


class Ids:
    """Hands out hash ids that no other request uses."""

    def __init__(self, start):
        self.next_id = start

    def take(self, n):
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids


def poisson_times_ms(rng, count, rate_per_s):
    t, out = 0.0, []
    for _ in range(count):
        out.append(round(t, 3))
        t += rng.expovariate(rate_per_s) * 1000.0
    return out


def row(ts, isl, osl, hash_ids, **extra):
    assert isl <= len(hash_ids) * BLOCK and isl > 0
    r = {"timestamp": ts, "input_length": isl, "output_length": osl, "hash_ids": hash_ids}
    r.update(extra)
    return r


def prefixed_request(rng, ids, prefixes, isl):
    """hash ids for a prompt of isl tokens that starts with one of the shared prefixes."""
    prefix = rng.choice(prefixes)
    need = hash_count(isl)
    if need <= len(prefix):
        return prefix[:need]
    return prefix + ids.take(need - len(prefix))


def classes_wspt():
    rng = random.Random(1001)
    ids = Ids(1_000_000)
    prefixes = [ids.take(rng.randint(2, 6)) for _ in range(8)]
    classes = ["interactive"] * 5 + ["batch"] * 4 + ["urgent"] + ["", "unknown"]
    rows = []
    for ts in poisson_times_ms(rng, 200, 40.0):
        isl = rng.choice([rng.randint(64, 1024), rng.randint(1024, 4096), rng.randint(4096, 7000)])
        osl = rng.randint(1, 48)
        if rng.random() < 0.6:
            h = prefixed_request(rng, ids, prefixes, isl)
        else:
            h = ids.take(hash_count(isl))
        cls = rng.choice(classes)
        extra = {"policy_class": cls} if cls else {}
        if rng.random() < 0.1:
            extra["priority"] = rng.randint(1, 3)
        rows.append(row(ts, isl, osl, h, **extra))
    policy = """\
# classes-wspt fixture: two families x two cache buckets (FCFS and WSPT), one explicit class.
# The queue limits are present but never reached: in Dynamo 1.6.1's offline replay a queue
# rejection aborts the whole run (see docs/fidelity-notes.md, probe g).
default_policy_family: batch
uncached_isl_buckets:
  - min_tokens: 0
    bucket: cached
  - min_tokens: 1024
    bucket: uncached
policy_classes:
  - name: interactive_cached
    policy_family: interactive
    cache_bucket: cached
    queue_policy: wspt
    quantum: 1024
    prefill_busy_threshold: 4096
    request_queue_limit_per_worker: 1000
  - name: interactive_uncached
    policy_family: interactive
    cache_bucket: uncached
    queue_policy: fcfs
    quantum: 2048
    prefill_busy_threshold: 4096
    raw_isl_token_queue_limit_per_worker: 10000000
  - name: batch_cached
    policy_family: batch
    cache_bucket: cached
    queue_policy: wspt
    quantum: 256
    prefill_busy_threshold_frac: 0.25
  - name: batch_uncached
    policy_family: batch
    cache_bucket: uncached
    queue_policy: wspt
    quantum: 512
    prefill_busy_threshold: 2048
    cached_token_queue_limit_per_worker: 10000000
  - name: urgent
    queue_policy: fcfs
    quantum: 4096
    prefill_busy_threshold: 6144
"""
    return rows, policy, {"engine": {"backend": "vllm", "worker_type": "aggregated"}}


def prefix_sharing():
    rng = random.Random(2002)
    ids = Ids(2_000_000)
    prefixes = [ids.take(rng.randint(1, 8)) for _ in range(12)]
    rows = []
    for ts in poisson_times_ms(rng, 240, 25.0):
        isl = rng.randint(200, 5000)
        h = prefixed_request(rng, ids, prefixes, isl) if rng.random() < 0.8 else ids.take(hash_count(isl))
        rows.append(row(ts, isl, rng.randint(1, 40), h))
    return rows, None, {"engine": {"backend": "vllm", "worker_type": "aggregated"}}


def chunked_long():
    rng = random.Random(3003)
    ids = Ids(3_000_000)
    rows = []
    for ts in poisson_times_ms(rng, 80, 6.0):
        if rng.random() < 0.3:
            isl = rng.randint(8000, 30000)
            osl = rng.randint(1, 16)
        else:
            isl = rng.randint(16, 900)
            osl = rng.randint(1, 64)
        rows.append(row(ts, isl, osl, ids.take(hash_count(isl))))
    return rows, None, {"engine": {"backend": "vllm", "worker_type": "aggregated",
                                   "max_num_batched_tokens": 8192, "enable_chunked_prefill": True}}


def memory_pressure():
    rng = random.Random(4004)
    ids = Ids(4_000_000)
    rows = []
    shared = ids.take(2)
    for ts in poisson_times_ms(rng, 24, 20.0):
        isl = rng.randint(300, 1500)
        h = (shared + ids.take(hash_count(isl)))[: hash_count(isl)] if rng.random() < 0.3 else ids.take(hash_count(isl))
        rows.append(row(ts, isl, rng.randint(100, 400), h))
    return rows, None, {"engine": {"backend": "vllm", "worker_type": "aggregated",
                                   "num_gpu_blocks": 64, "max_num_seqs": 8}}


def priorities_long_output():
    rng = random.Random(5005)
    ids = Ids(5_000_000)
    rows = []
    for ts in poisson_times_ms(rng, 120, 30.0):
        isl = rng.randint(100, 3000)
        osl = rng.randint(100, 500)
        extra = {"policy_class": rng.choice(["gold", "silver"])}
        u = rng.random()
        if u < 0.25:
            extra["priority"] = rng.randint(1, 5)
        elif u < 0.4:
            extra["strict_priority"] = rng.randint(1, 2)
        elif u < 0.45:
            extra["priority"] = -rng.randint(1, 3)
        rows.append(row(ts, isl, osl, ids.take(hash_count(isl)), **extra))
    policy = """\
# priorities-long-output fixture: long decodes keep prompts queued; priority (seconds earlier)
# and strict_priority (tier) reorder each class's queue.
default_policy_family: silver
uncached_isl_buckets:
  - min_tokens: 0
    bucket: all
policy_classes:
  - name: gold
    policy_family: gold
    cache_bucket: all
    queue_policy: fcfs
    quantum: 1024
    prefill_busy_threshold: 1024
  - name: silver
    policy_family: silver
    cache_bucket: all
    queue_policy: wspt
    quantum: 512
    prefill_busy_threshold: 1024
"""
    return rows, policy, {"engine": {"backend": "vllm", "worker_type": "aggregated",
                                     "max_num_seqs": 16}}


def premium_rows():
    rows = []
    n = 0
    for i in range(320):
        order = ("premium", "regular") if i % 2 == 0 else ("regular", "premium")
        for cls in order:
            rows.append(row(0, 512, 1, [7_000_000 + n], policy_class=cls))
            n += 1
    return rows


def premium_policy(regular_quantum):
    return f"""\
# The CPU-mocker regression workload of seeds/deficit-round-robin.md (quanta 512:{regular_quantum}).
default_policy_family: regular
uncached_isl_buckets:
  - min_tokens: 0
    bucket: all
policy_classes:
  - name: premium
    policy_family: premium
    cache_bucket: all
    queue_policy: fcfs
    quantum: 512
    prefill_busy_threshold: 1536
    request_queue_limit_per_worker: 1024
  - name: regular
    policy_family: regular
    cache_bucket: all
    queue_policy: fcfs
    quantum: {regular_quantum}
    prefill_busy_threshold: 1536
    request_queue_limit_per_worker: 1024
"""


PREMIUM_ENGINE = {"engine": {"backend": "vllm", "worker_type": "aggregated", "max_num_seqs": 4,
                             "max_num_batched_tokens": 8192, "enable_prefix_caching": False}}

def closed_prefix_sharing():
    """Closed loop over a prefix-sharing trace whose timestamps are shuffled: Dynamo issues
    rows in file order and ignores the timestamps."""
    rng = random.Random(8008)
    ids = Ids(8_000_000)
    prefixes = [ids.take(rng.randint(1, 6)) for _ in range(10)]
    times = poisson_times_ms(rng, 200, 20.0)
    rng.shuffle(times)
    rows = []
    for ts in times:
        isl = rng.randint(200, 5000)
        h = prefixed_request(rng, ids, prefixes, isl) if rng.random() < 0.8 else ids.take(hash_count(isl))
        rows.append(row(ts, isl, rng.randint(1, 60), h))
    return rows, None, {"engine": {"backend": "vllm", "worker_type": "aggregated"}}


def with_args(build, args):
    """A fixture built by `build` and replayed with extra flags (replay_args.txt)."""
    return lambda: build()[:3] + (args,)


FIXTURES = {
    "classes-wspt": classes_wspt,
    "prefix-sharing": prefix_sharing,
    "chunked-long": chunked_long,
    "memory-pressure": memory_pressure,
    "priorities-long-output": priorities_long_output,
    "premium-weighted": lambda: (premium_rows(), premium_policy(128), PREMIUM_ENGINE),
    "premium-equal": lambda: (premium_rows(), premium_policy(512), PREMIUM_ENGINE),
    # Dynamo's other replay modes; the flags go to tools/dynamo-replay and `routersim replay` alike.
    "closed-prefix-sharing": with_args(closed_prefix_sharing, "--replay-concurrency 6"),
    "closed-classes": with_args(classes_wspt, "--replay-concurrency 24"),
    "closed-memory-pressure": with_args(memory_pressure, "--replay-concurrency 10"),
    "speedup-prefix-sharing": with_args(prefix_sharing, "--arrival-speedup-ratio 3"),
    "speedup-priorities": with_args(priorities_long_output, "--arrival-speedup-ratio 2.5"),
    "slowdown-chunked": with_args(chunked_long, "--arrival-speedup-ratio 0.5"),
}


def main():
    root = sys.argv[1]
    for name, build in FIXTURES.items():
        rows, policy, engine, *args = build()
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "trace.jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        if policy is not None:
            with open(os.path.join(d, "policy.yaml"), "w") as f:
                f.write(policy)
        with open(os.path.join(d, "engine.json"), "w") as f:
            json.dump(engine, f, indent=1)
            f.write("\n")
        if args:
            with open(os.path.join(d, "replay_args.txt"), "w") as f:
                f.write(args[0] + "\n")


if __name__ == "__main__":
    main()
