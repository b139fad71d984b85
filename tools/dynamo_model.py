#!/usr/bin/env python3
"""Black-box model of Dynamo 1.6.1's offline replay with ONE worker: the KV router's
policy-class queue (DRR across classes, FCFS/WSPT within a class, strict priority, busy
thresholds) in front of the worker model of tools/mocker_model.py. Written from the
measurements in docs/fidelity-notes.md, not from Dynamo's code. It reproduces every row of
all seven fidelity fixtures (admit_ms, first_token_ms, completion_ms, path, reused tokens).
Queue limits are not modelled (a rejection aborts Dynamo's replay).

Usage: dynamo_model.py FIXTURE_DIR   (trace.jsonl, engine.json, optional policy.yaml; compares
                                      with dynamo.csv; exit 1 on any mismatch)
"""
import csv
import json
import math
import os
import sys

import yaml

import mocker_model as mocker

class PolicyClass:
    def __init__(self, spec, index, max_batched):
        self.name, self.index = spec["name"], index
        self.family, self.bucket = spec.get("policy_family"), spec.get("cache_bucket")
        self.wspt = spec.get("queue_policy", "fcfs") == "wspt"
        self.quantum = spec["quantum"]
        self.threshold = spec.get("prefill_busy_threshold")
        frac = spec.get("prefill_busy_threshold_frac")
        self.frac_threshold = None if frac is None else frac * max_batched
        self.entries, self.deficit = [], 0

    def queueing_enabled(self):
        return self.threshold is not None or self.frac_threshold is not None

    def busy(self, active_prefill_tokens):
        return ((self.threshold is not None and active_prefill_tokens > self.threshold) or
                (self.frac_threshold is not None and active_prefill_tokens > self.frac_threshold))

    def head(self):
        # larger wins: strict priority, then score, then earlier enqueue
        return max(self.entries, key=lambda e: (e["strict"], e["score"], -e["seq"]), default=None)


class Router:
    def __init__(self, policy, max_batched):
        policy = policy or {}
        self.classes = [PolicyClass(c, i, max_batched) for i, c in enumerate(policy.get("policy_classes", []))]
        self.default_family = policy.get("default_policy_family")
        self.buckets = policy.get("uncached_isl_buckets", [])
        self.families = {c.family for c in self.classes if c.family}
        self.cursor, self.carry, self.next_seq, self.pending = 0, None, 0, 0
        self.active_prefill_tokens = 0

    def resolve(self, requested, uncached):
        for c in self.classes:
            if c.family is None and c.name == requested:
                return c
        family = requested if requested in self.families else self.default_family
        bucket = [b["bucket"] for b in self.buckets if b["min_tokens"] <= uncached][-1]
        return next(c for c in self.classes if c.family == family and c.bucket == bucket)

    def enqueue(self, cls, now_ns, uncached, row):
        jump = max(0, row.get("priority", 0))
        cost = max(1, uncached)
        score = (1 + jump) / cost if cls.wspt else jump - now_ns / 1e9
        cls.entries.append({"strict": row.get("strict_priority", 0), "score": score,
                            "seq": self.next_seq, "cost": cost, "hint": uncached, "row": row})
        self.next_seq += 1
        self.pending += 1

    def _candidate(self, cls):
        head = cls.head()
        return head if head is not None and not cls.busy(self.active_prefill_tokens) else None

    def _take(self, cls, entry):
        self.cursor = (cls.index + 1) % len(self.classes)
        cls.entries.remove(entry)
        cls.deficit = max(0, cls.deficit - entry["cost"])
        self.pending -= 1
        if not cls.entries:
            cls.deficit = 0
        elif cls.deficit > 0:
            self.carry = cls.index
        return entry

    def pop_next(self):
        """One DRR arbitration (docs/scheduling.md#deficit-round-robin); None if nothing can dispatch."""
        if self.pending == 0:
            self.carry = None
            return None
        candidates, carried, self.carry = {}, self.carry, None
        if carried is not None:
            cls = self.classes[carried]
            cand = self._candidate(cls)
            if cand is not None and cand["cost"] <= cls.deficit:
                return self._take(cls, cand)
            candidates[carried] = cand
            if not cls.entries:
                cls.deficit = 0
        order = [(self.cursor + k) % len(self.classes) for k in range(len(self.classes))]
        for i in order:
            cls = self.classes[i]
            cand = candidates[i] if i == carried else self._candidate(cls)
            if cand is None:
                if not cls.entries:
                    cls.deficit = 0
                continue
            candidates[i] = cand
            if cand["cost"] <= cls.deficit:
                return self._take(cls, cand)
            cls.deficit += cls.quantum
            if cand["cost"] <= cls.deficit:
                return self._take(cls, cand)
        live = [i for i in order if candidates.get(i) is not None]
        if not live:
            return None
        rounds = min(math.ceil(max(0, candidates[i]["cost"] - self.classes[i].deficit) / self.classes[i].quantum)
                     for i in live)
        for i in live:
            self.classes[i].deficit += self.classes[i].quantum * rounds
        i = next(i for i in live if candidates[i]["cost"] <= self.classes[i].deficit)
        return self._take(self.classes[i], candidates[i])


def run(fixture_dir):
    policy_path = os.path.join(fixture_dir, "policy.yaml")
    policy = yaml.safe_load(open(policy_path)) if os.path.exists(policy_path) else None
    engine = mocker.engine_args(os.path.join(fixture_dir, "engine.json"))
    router = Router(policy, engine["max_num_batched_tokens"])
    trace_path = os.path.join(fixture_dir, "trace.jsonl")
    rows = [json.loads(line) for line in open(trace_path) if line.strip()]
    requests = mocker.load_requests(trace_path)
    worker = mocker.Worker(**engine)
    visible_blocks = set()  # the router's index: KV events are published at pass end
    booked, path = {}, {}

    def router_cached_tokens(r):
        n = 0
        for key in worker._chain(r):
            if key not in visible_blocks:
                break
            n += 1
        return min(n * worker.bs, r.isl)

    def dispatch(r, hint, how):
        booked[r.row], path[r.row] = hint, how
        router.active_prefill_tokens += hint
        worker.waiting.append(r)

    def arrive(r, now_ns):
        uncached = r.isl - router_cached_tokens(r)
        if not router.classes:
            return dispatch(r, uncached, "immediate")
        cls = router.resolve(rows[r.row].get("policy_class", ""), uncached)
        if cls.queueing_enabled() and (cls.entries or cls.busy(router.active_prefill_tokens)):
            router.enqueue(cls, now_ns, uncached, rows[r.row] | {"_req": r})
            path[r.row] = "queued"
        else:
            dispatch(r, uncached, "immediate")

    def drain():
        while (entry := router.pop_next()) is not None:
            dispatch(entry["row"]["_req"], entry["hint"], "queued")  # hint from enqueue time

    pending = sorted(requests, key=lambda r: (r.arrival_ns, r.row))
    k, now = 0, 0
    while k < len(pending) or worker.running or worker.waiting or router.pending:
        if not worker.running and not worker.waiting:
            assert k < len(pending), "queued requests but an idle worker"
            now = max(now, pending[k].arrival_ns)
            while k < len(pending) and pending[k].arrival_ns <= now:
                arrive(pending[k], pending[k].arrival_ns)
                k += 1
        before = {r.row: r.first_token_ns for r in requests}
        end = worker.run_pass(now)
        while k < len(pending) and pending[k].arrival_ns < end:  # routed during the pass
            arrive(pending[k], pending[k].arrival_ns)
            k += 1
        now = end
        visible_blocks = {key for key in list(worker.active) + list(worker.inactive) if key[0] == "F"}
        for r in worker.last_scheduled:  # one lifecycle event at a time, each drains the queue
            first = before[r.row] is None and r.first_token_ns == end
            done = r.done_ns == end
            if first or (done and r.first_token_ns is None):
                router.active_prefill_tokens -= booked[r.row]
            if first or done:
                drain()
        while k < len(pending) and pending[k].arrival_ns <= now:  # ties: after pass-end events
            arrive(pending[k], pending[k].arrival_ns)
            k += 1
    return requests, path


def main():
    d = sys.argv[1]
    requests, path = run(d)
    bad = 0
    for r, ref in zip(requests, csv.DictReader(open(os.path.join(d, "dynamo.csv")))):
        times = [r.admissions[0][0], r.first_token_ns, r.done_ns]
        theirs = [ref["admit_ms"], ref["first_token_ms"], ref["completion_ms"]]
        for a, b in zip(times, theirs):
            if (a is None) != (b == "") or (a is not None and abs(a / 1e6 - float(b)) > 1e-6):
                bad += 1
        bad += path[r.row] != ref["path"]
        bad += max(c for _, c in r.admissions) != int(ref["reused_input_tokens"])
    print(f"{d}: {len(requests)} rows, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
