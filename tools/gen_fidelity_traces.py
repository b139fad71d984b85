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


def kv_lag_classes():
    """30 prefixes of 6 blocks, each asked for once and then by five followers 40-82 ms later:
    with a KV event lag the router sees the prefix late, so followers fall into other cache
    buckets than without it (classes-wspt's policy)."""
    rng = random.Random(20)
    rows = []
    hid = 7_000_000
    for g in range(30):
        t0 = g * 400.0 + rng.uniform(0, 50)
        prefix = list(range(hid, hid + 6))
        hid += 6
        times = [t0] + [t0 + 40 + 9 * k + rng.uniform(0, 6) for k in range(5)]
        for t in times:
            fresh = [hid]
            hid += 1
            rows.append({"timestamp": round(t, 3), "input_length": 6 * 512 + rng.randint(1, 511),
                         "output_length": rng.randint(1, 30), "hash_ids": prefix + fresh,
                         "policy_class": rng.choice(["interactive", "batch"])})
    rows.sort(key=lambda r: r["timestamp"])
    _, policy, engine = classes_wspt()
    return rows, policy, engine


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


# ----- sessions: multi-turn conversations (session_id; later turns carry delay) ------------

def conversation_turns(rng, ids, first_isl, turns, new_tokens, osl_range, system=()):
    """(isl, osl, hash_ids) of each turn of one conversation: turn k's prompt is turn k-1's
    prompt, its output and new tokens, so it repeats the ids of turn k-1's full blocks (a
    partial last block changes once the output is appended, so it gets a fresh id)."""
    system = list(system)
    isl = max(first_isl, len(system) * BLOCK + 1)
    ids_now = system + ids.take(hash_count(isl) - len(system))
    out = []
    for k in range(turns):
        osl = rng.randint(*osl_range)
        out.append((isl, osl, ids_now))
        kept = ids_now[: isl // BLOCK]
        isl = isl + osl + rng.randint(*new_tokens)
        ids_now = kept + ids.take(hash_count(isl) - len(kept))
    return out


def session_rows(name, start_ms, turns, think_ms, extra=None):
    """Rows of one session: the first turn at start_ms, each later one `delay` after the turn
    before (think_ms(k) for turn k), with the fields extra(k) gives."""
    rows = []
    for k, (isl, osl, h) in enumerate(turns):
        r = {"session_id": name, "input_length": isl, "output_length": osl, "hash_ids": h}
        if k == 0:
            r["timestamp"] = start_ms
        else:
            r["delay"] = think_ms(k)
        if extra is not None:
            r.update(extra(k))
        rows.append(r)
    return rows


def interleave(rng, sessions):
    """One file from the sessions' rows: each session's rows keep their order, sessions
    interleave (a session's turns need not be contiguous in the file)."""
    queues = [list(rows) for rows in sessions if rows]
    out = []
    while queues:
        q = rng.choice(queues[: 3])
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
    return out


def sessions_prefix_reuse():
    """Conversations whose later turns repeat the earlier prompt: prefix reuse across turns,
    a pool small enough that idle conversations lose blocks, shared system prompts, and later
    turns timed three ways (delay, none = 0, a timestamp the delay is inferred from)."""
    rng = random.Random(9101)
    ids = Ids(9_100_000)
    systems = [ids.take(rng.randint(1, 3)) for _ in range(3)]
    sessions = []
    for i, start in enumerate(poisson_times_ms(rng, 45, 6.0)):
        system = rng.choice(systems) if rng.random() < 0.5 else ()
        turns = conversation_turns(rng, ids, rng.randint(200, 2500), rng.randint(2, 6),
                                   (20, 700), (1, 40), system)
        rows = session_rows(f"conv-{i}", start, turns, lambda k: round(rng.uniform(5, 400), 3))
        for k, r in enumerate(rows[1:], 1):
            u = rng.random()
            if u < 0.15:
                del r["delay"]
            elif u < 0.3:
                # A timestamp instead of a delay: the delay is inferred from the latest
                # earlier timestamp of the session (the first turn's here).
                del r["delay"]
                r["timestamp"] = round(start + rng.uniform(0, 50) + 2000.0 * k, 3)
        sessions.append(rows)
    return interleave(rng, sessions), None, {"engine": {"backend": "vllm", "worker_type": "aggregated",
                                                  "num_gpu_blocks": 700}}


SESSION_POLICY = """\
# sessions-classes-drr fixture: chat, agent and batch families x two cache buckets; a later
# turn of a conversation is mostly cached, so it lands in the `cached` bucket of its family.
# No queue limits: in Dynamo 1.6.1's offline replay a queue rejection aborts the whole run.
default_policy_family: batch
uncached_isl_buckets:
  - min_tokens: 0
    bucket: cached
  - min_tokens: 1024
    bucket: uncached
policy_classes:
  - name: chat_cached
    policy_family: chat
    cache_bucket: cached
    queue_policy: fcfs
    quantum: 2048
    prefill_busy_threshold: 3072
  - name: chat_uncached
    policy_family: chat
    cache_bucket: uncached
    queue_policy: fcfs
    quantum: 2048
    prefill_busy_threshold: 3072
  - name: agent_cached
    policy_family: agent
    cache_bucket: cached
    queue_policy: wspt
    quantum: 1024
    prefill_busy_threshold: 2048
  - name: agent_uncached
    policy_family: agent
    cache_bucket: uncached
    queue_policy: wspt
    quantum: 1024
    prefill_busy_threshold: 2048
  - name: batch_cached
    policy_family: batch
    cache_bucket: cached
    queue_policy: fcfs
    quantum: 256
    prefill_busy_threshold: 1024
  - name: batch_uncached
    policy_family: batch
    cache_bucket: uncached
    queue_policy: wspt
    quantum: 512
    prefill_busy_threshold: 1024
"""


def sessions_classes_drr():
    """Chat conversations, agent loops (many quick turns, growing context) and plain batch
    rows under DRR: each turn is classified from its own row, so a few later turns change
    family or drop it (the default family), and some carry a priority."""
    rng = random.Random(9202)
    ids = Ids(9_200_000)
    sessions = []
    for i, start in enumerate(poisson_times_ms(rng, 30, 4.0)):
        turns = conversation_turns(rng, ids, rng.randint(300, 1500), rng.randint(2, 5),
                                   (30, 300), (5, 60))

        def chat_extra(k):
            u = rng.random()
            extra = {"policy_class": "chat"}
            if k > 0 and u < 0.1:
                extra["policy_class"] = "batch"
            elif k > 0 and u < 0.15:
                del extra["policy_class"]
            if rng.random() < 0.15:
                extra["priority"] = rng.randint(1, 3)
            return extra
        sessions.append(session_rows(f"chat-{i}", start, turns,
                                     lambda k: round(rng.uniform(100, 1500), 3), extra=chat_extra))
    for i, start in enumerate(poisson_times_ms(rng, 15, 2.0)):
        turns = conversation_turns(rng, ids, rng.randint(1500, 3000), rng.randint(6, 12),
                                   (50, 400), (10, 80))
        sessions.append(session_rows(f"agent-{i}", start, turns,
                                     lambda k: round(rng.uniform(0, 30), 3),
                                     extra=lambda k: {"policy_class": "agent"}))
    for start in poisson_times_ms(rng, 120, 12.0):
        isl = rng.randint(200, 4000)
        sessions.append([row(start, isl, rng.randint(1, 30), ids.take(hash_count(isl)),
                             policy_class="batch")])
    return interleave(rng, sessions), SESSION_POLICY, {"engine": {"backend": "vllm",
                                                                 "worker_type": "aggregated",
                                                                 "max_num_seqs": 16}}


def sessions_closed_loop():
    """Sessions and plain rows in a closed loop: a session holds its slot through its think
    times; timestamps (shuffled) are ignored, sessions take slots in first-appearance order."""
    rng = random.Random(9303)
    ids = Ids(9_300_000)
    times = poisson_times_ms(rng, 70, 10.0)
    rng.shuffle(times)
    sessions = []
    for i, start in enumerate(times):
        if rng.random() < 0.35:
            isl = rng.randint(100, 3000)
            sessions.append([row(start, isl, rng.randint(1, 40), ids.take(hash_count(isl)))])
            continue
        turns = conversation_turns(rng, ids, rng.randint(200, 2000), rng.randint(2, 5),
                                   (20, 500), (1, 40))
        sessions.append(session_rows(f"s{i}", start, turns,
                                     lambda k: round(rng.uniform(0, 200), 3)))
    return interleave(rng, sessions), None, {"engine": {"backend": "vllm", "worker_type": "aggregated"}}


def sessions_speedup():
    """Conversations under an arrival speed-up: session starts and delays are both divided."""
    rng = random.Random(9404)
    ids = Ids(9_400_000)
    sessions = []
    for i, start in enumerate(poisson_times_ms(rng, 40, 3.0)):
        turns = conversation_turns(rng, ids, rng.randint(200, 2500), rng.randint(2, 5),
                                   (20, 600), (1, 40))
        sessions.append(session_rows(f"u{i}", start, turns,
                                     lambda k: round(rng.uniform(10, 800), 3)))
    return interleave(rng, sessions), None, {"engine": {"backend": "vllm", "worker_type": "aggregated"}}


def sessions_mixed_plain():
    """Plain rows and sessions in one file: plain rows are one-turn sessions named
    `request_<line>`; a session named after an earlier plain row's line joins it as its next
    turn; the empty string is a session id; `delay_ms` is `delay`'s other name; a later turn
    with neither field follows the turn before at once; one session has a single turn."""
    rng = random.Random(9505)
    ids = Ids(9_500_000)
    sessions = []
    for i, start in enumerate(poisson_times_ms(rng, 25, 4.0)):
        turns = conversation_turns(rng, ids, rng.randint(200, 2000), rng.randint(2, 4),
                                   (20, 400), (1, 30))
        name = "" if i == 3 else f"m{i}"
        if i == 5:
            turns = turns[:1]
        rows = session_rows(name, start, turns, lambda k: round(rng.uniform(0, 300), 3))
        for r in rows[1:]:
            u = rng.random()
            if u < 0.2:
                r["delay_ms"] = r.pop("delay")
            elif u < 0.3:
                del r["delay"]
        sessions.append(rows)
    plain = []
    for start in poisson_times_ms(rng, 80, 16.0):
        isl = rng.randint(50, 3000)
        plain.append([row(start, isl, rng.randint(1, 40), ids.take(hash_count(isl)))])
    everyone = sorted(sessions + plain, key=lambda rows: rows[0]["timestamp"])
    rows = interleave(rng, everyone)
    # A session whose id is the implicit name of an earlier plain row (1-based line): it
    # continues that row's one-turn session.
    line = next(i for i, r in enumerate(rows) if "session_id" not in r and i > 10) + 1
    first = rows[line - 1]
    rows.append({"session_id": f"request_{line}", "delay": 25.0,
                 "input_length": first["input_length"] + 100, "output_length": 3,
                 "hash_ids": first["hash_ids"][: first["input_length"] // BLOCK]
                 + ids.take(hash_count(first["input_length"] + 100) - first["input_length"] // BLOCK)})
    return rows, None, {"engine": {"backend": "vllm", "worker_type": "aggregated"}}


def dp_lockstep():
    """Unshared prompts on one worker of two attention-DP ranks, busy enough that a request
    routed to an idle rank often waits for the other rank's pass (the ranks pass together)."""
    rng = random.Random(5005)
    ids = Ids(5_000_000)
    rows = []
    for ts in poisson_times_ms(rng, 160, 30.0):
        isl = rng.randint(100, 3000)
        rows.append(row(ts, isl, rng.randint(1, 60), ids.take(hash_count(isl))))
    return rows, None, {"engine": {"backend": "vllm", "worker_type": "aggregated",
                                   "num_gpu_blocks": 512, "max_num_seqs": 16,
                                   "max_num_batched_tokens": 4096}, "dp_size": 2}


def threshold_two_workers():
    """A burst of prefix-sharing requests on two workers behind a queue threshold: requests
    wait in the router and are released as prefills finish, each booking its load on the
    worker chosen. The burst keeps both workers loaded, so after the first request no two
    workers tie (1.6.1 breaks ties at random)."""
    rng = random.Random(6006)
    ids = Ids(6_000_000)
    prefixes = [ids.take(rng.randint(1, 6)) for _ in range(8)]
    rows = []
    for ts in poisson_times_ms(rng, 90, 150.0):
        isl = rng.randint(200, 4000)
        h = prefixed_request(rng, ids, prefixes, isl) if rng.random() < 0.8 else ids.take(hash_count(isl))
        rows.append(row(ts, isl, rng.randint(1, 40), h))
    engine = {"engine": {"backend": "vllm", "worker_type": "aggregated"}}
    return rows, None, engine, "--workers 2", {"router.json": {"router_queue_threshold": 0.2}}


def one_token_release():
    """Two workers over a queue threshold: row 1's only token is its first, so its prefill's
    end is its completion, and the queued row 3 is released by that completion onto the
    worker row 1 left, which no longer counts row 1's load."""
    rows = [row(0.0, 82, 2, [18200000]), row(0.0, 1556, 1, [18200010, 18200011, 18200012, 18200013]),
            row(11.681, 784, 203, [18200020, 18200021]), row(11.681, 114, 16, [800020])]
    engine = {"engine": {"backend": "vllm", "worker_type": "aggregated", "num_gpu_blocks": 100,
                         "max_num_batched_tokens": 2048, "max_num_seqs": 2}}
    router = {"overlap_score_weight": 0.0, "router_queue_threshold": 0.25}
    return rows, None, engine, "--workers 2", {"router.json": router}


def with_args(build, args):
    """A fixture built by `build` and replayed with extra flags (replay_args.txt)."""
    return lambda: build()[:3] + (args,)


DISAGG_1P1D = "--prefill-workers 1 --decode-workers 1"


def transfer(bandwidth_gb_per_s, mode="full_prompt", bytes_per_token=131072):
    """A prefill engine that times KV transfers (the decode engine's settings are ignored)."""
    return {"engine": {"kv_transfer_bandwidth": bandwidth_gb_per_s,
                       "kv_transfer_bytes_per_token": bytes_per_token,
                       "kv_transfer_timing_mode": mode}}


def disaggregated(build, args="", prefill=None, decode=None):
    """A fixture built by `build` and replayed on 1 prefill + 1 decode worker, with the
    prefill and decode engines given (prefill.json, decode.json; default: engine.json's)."""
    def make():
        rows, policy, engine = build()[:3]
        flags, files = [DISAGG_1P1D] + ([args] if args else []), {}
        for flag, name, config in [("--prefill-engine", "prefill.json", prefill),
                                   ("--decode-engine", "decode.json", decode)]:
            if config is not None:
                flags.append(f"{flag} {name}")
                files[name] = config
        return rows, policy, engine, " ".join(flags), files
    return make


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
    # The router's index hears KV events late (Dynamo's kv_event_lag_ms).
    "kv-lag-classes": with_args(kv_lag_classes, "--kv-event-lag-ms 20"),
    # Multi-turn sessions (session_id, delay): Dynamo's session driver.
    "sessions-prefix-reuse": sessions_prefix_reuse,
    "sessions-classes-drr": sessions_classes_drr,
    "sessions-closed-loop": with_args(sessions_closed_loop, "--replay-concurrency 4"),
    "sessions-speedup": with_args(sessions_speedup, "--arrival-speedup-ratio 2"),
    "sessions-mixed-plain": sessions_mixed_plain,
    # Disaggregated serving: 1 prefill + 1 decode worker, KV transfers between them.
    "disagg-premium-weighted": disaggregated(
        lambda: (premium_rows(), premium_policy(128), PREMIUM_ENGINE)),
    "disagg-prefix-missing": disaggregated(
        prefix_sharing, prefill=transfer(25, "destination_missing")),
    "disagg-bandwidth-bound": disaggregated(prefix_sharing, prefill=transfer(1)),
    "disagg-decode-pressure": disaggregated(
        memory_pressure, prefill={"engine": {}},
        decode={"engine": {"num_gpu_blocks": 64, "max_num_seqs": 8}}),
    "disagg-closed-loop": disaggregated(
        closed_prefix_sharing, "--replay-concurrency 6",
        prefill=transfer(50, "destination_missing")),
    "disagg-speedup": disaggregated(
        prefix_sharing, "--arrival-speedup-ratio 3", prefill=transfer(25)),
    # A worker's attention-DP ranks pass in lock-step.
    "dp-lockstep": dp_lockstep,
    # Queued releases on two workers (the router books each on the worker it picks).
    "threshold-two-workers": threshold_two_workers,
    # A one-token request's completion, not its prefill's end, releases the queue.
    "one-token-release": one_token_release,
    # Round robin over two workers of two ranks each: workers in turn, each worker's ranks in turn.
    "round-robin-dp": with_args(dp_lockstep, "--workers 2 --router-mode round_robin"),
}


def main():
    root = sys.argv[1]
    for name, build in FIXTURES.items():
        rows, policy, engine, *rest = build()
        args, files = rest[:1], (rest[1] if len(rest) > 1 else {})
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
        for file_name, config in files.items():
            with open(os.path.join(d, file_name), "w") as f:
                json.dump(config, f, indent=1)
                f.write("\n")


if __name__ == "__main__":
    main()
