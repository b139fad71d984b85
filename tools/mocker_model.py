#!/usr/bin/env python3
"""Black-box model of ONE Dynamo 1.6.1 mock worker (vLLM-style, aggregated), written from the
measurements in docs/fidelity-notes.md (not from Dynamo's code). It has no router: every
request goes straight to the worker, so it applies to traces replayed without a policy. It
reproduces Dynamo's admit_ms / first_token_ms / completion_ms / reused_input_tokens to the ns
on the prefix-sharing, chunked-long and memory-pressure fixtures and on every probe in the
notes. It is a readable executable statement of the rules for the Rust mocker.

Usage: mocker_model.py FIXTURE_DIR        (reads trace.jsonl + engine.json, and compares with
                                           dynamo.csv when present; exit 1 on a mismatch)
"""
import csv
import itertools
import json
import os
import sys
from fractions import Fraction

TRACE_BLOCK = 512


def prefill_ms(tokens):
    t = float(tokens)
    return 4.209989e-07 * (t * t) + 1.518344e-02 * t + 16.50142 if tokens > 0 else 0.0


def decode_ms(active_tokens, total_tokens):
    p = min(active_tokens / total_tokens, 1.0)
    return max(1.0, -25.74 * (p * p) + 54.01 * p + 5.74)


def to_ns(ms):
    """As Rust's Duration::from_secs_f64(ms / 1000.0): exact value of the f64, nearest ns."""
    return round(Fraction(ms / 1000.0) * 10**9)


_fresh_token = itertools.count(10**12)  # generated tokens are unique: never shared


class Request:
    def __init__(self, row, arrival_ns, isl, osl, prompt):
        self.row, self.arrival_ns, self.isl, self.osl = row, arrival_ns, isl, osl
        self.tokens = prompt  # prompt, then generated tokens
        self.generated = 0
        self.computed = 0
        self.blocks = []  # block keys held, in order
        self.epoch = 0  # bumps on preemption so partial-block keys stay unique
        self.admissions = []  # (time_ns, cached_tokens)
        self.first_token_ns = None
        self.done_ns = None

    def seq_len(self):
        return self.isl + self.generated


class Worker:
    def __init__(self, num_gpu_blocks=16384, block_size=64, max_num_seqs=256,
                 max_num_batched_tokens=8192, enable_prefix_caching=True, lifo=True,
                 enable_chunked_prefill=True):
        assert enable_chunked_prefill, "model covers chunked prefill only"
        self.nb, self.bs, self.max_seqs = num_gpu_blocks, block_size, max_num_seqs
        self.budget, self.caching, self.lifo = max_num_batched_tokens, enable_prefix_caching, lifo
        self.active = {}  # key -> refcount
        self.inactive = {}  # key -> LRU stamp (full cached blocks with refcount 0)
        self.stamp = 0
        self.waiting, self.running = [], []

    # --- blocks -------------------------------------------------------------------------
    def _chain(self, r):
        h = ()
        for b in range(len(r.tokens) // self.bs):
            h = hash((h, tuple(r.tokens[b * self.bs:(b + 1) * self.bs])))
            yield ("F", h)

    def _keys(self, r, upto):
        keys, full = [], list(self._chain(r))
        for b in range((upto + self.bs - 1) // self.bs):
            if (b + 1) * self.bs <= upto and b < len(full):
                keys.append(full[b] if self.caching else ("U", r.row, b, r.epoch))
            else:
                keys.append(("P", r.row, b, r.epoch))
        return keys

    def _leading_blocks(self, r, pools):
        n = 0
        for key in self._chain(r):
            if not any(key in p for p in pools):
                break
            n += 1
        return n

    def _ref(self, key):
        if key in self.active:
            self.active[key] += 1
            return
        if key in self.inactive:
            del self.inactive[key]
        elif len(self.active) + len(self.inactive) >= self.nb:
            del self.inactive[min(self.inactive, key=self.inactive.get)]  # LRU eviction
        self.active[key] = 1

    def _deref(self, key, keep):
        self.active[key] -= 1
        if self.active[key] == 0:
            del self.active[key]
            if keep and key[0] == "F":
                self.stamp += 1
                self.inactive[key] = self.stamp

    def _allocate(self, r, upto):
        """Holds blocks for tokens [0, upto); False (nothing changed) if the pool is full."""
        keys = self._keys(r, upto)
        fresh = sum(1 for i, k in enumerate(keys) if i >= len(r.blocks)
                    and k not in self.active and k not in self.inactive)
        if fresh > self.nb - len(self.active):  # free + evictable inactive
            return False
        for i, k in enumerate(keys):
            if i < len(r.blocks):
                if r.blocks[i] != k:  # a partial block became full
                    self._deref(r.blocks[i], keep=False)
                    self._ref(k)
                    r.blocks[i] = k
            else:
                self._ref(k)
                r.blocks.append(k)
        return True

    def _release(self, r):
        for k in reversed(r.blocks):
            self._deref(k, keep=True)
        r.blocks = []

    # --- one pass -----------------------------------------------------------------------
    def _preempt(self, scheduled):
        victim = self.running[-1] if self.lifo else self.running[0]
        self.running.remove(victim)
        self._release(victim)
        returned = scheduled.pop(victim, 0)
        victim.computed = 0
        victim.epoch += 1
        self.waiting.insert(0, victim)
        return victim, returned

    def _schedule_running(self, scheduled):
        budget, preempted, i = self.budget, False, 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            n = min(r.seq_len() - r.computed, budget)
            while not self._allocate(r, r.computed + n):
                victim, returned = self._preempt(scheduled)
                budget += returned
                preempted = True
                if victim is r:
                    break
            if r in self.running:
                scheduled[r] = n
                budget -= n
                i += 1
        return budget, preempted

    def _admit_waiting(self, now, budget, scheduled):
        while self.waiting and len(self.running) < self.max_seqs and budget > 0:
            r = self.waiting[0]
            blocks = (r.seq_len() + self.bs - 1) // self.bs
            assert blocks <= self.nb, "Dynamo rejects this request (status rejected)"
            held = self._leading_blocks(r, [self.active]) if self.caching else 0
            if blocks - held > self.nb - len(self.active):
                break
            self.waiting.pop(0)
            hit = self._leading_blocks(r, [self.active, self.inactive]) if self.caching else 0
            r.computed = min(hit, (r.seq_len() - 1) // self.bs) * self.bs
            r.admissions.append((now, r.computed))
            n = min(r.seq_len() - r.computed, budget)
            assert self._allocate(r, r.computed + n)
            self.running.append(r)
            scheduled[r] = n
            budget -= n

    def run_pass(self, now):
        scheduled = {}
        budget, preempted = self._schedule_running(scheduled)
        if not preempted:
            self._admit_waiting(now, budget, scheduled)
        prompt = [(r, min(r.computed + n, r.isl) - r.computed)
                  for r, n in scheduled.items() if r.computed < r.isl]
        new_tokens = 0
        if prompt:
            c = len(prompt)
            mean_isl = sum(r.computed + n for r, n in prompt) // c
            mean_prefix = sum(r.computed for r, _ in prompt) // c
            new_tokens = c * (mean_isl - mean_prefix)
        decoders = [r for r, n in scheduled.items()
                    if r.generated >= 1 and r.computed + n >= r.seq_len()]
        active = sum(r.seq_len() for r in decoders)
        end = now + (to_ns(prefill_ms(new_tokens)) if new_tokens > 0 else 0)
        end += to_ns(decode_ms(active, self.nb * self.bs)) if decoders else 0
        for r, n in scheduled.items():
            r.computed += n
        self.last_scheduled = list(scheduled)  # order of this pass's lifecycle events
        for r in list(scheduled):
            if r.computed >= r.seq_len():
                if r.generated < r.osl:
                    r.generated += 1
                    r.tokens.append(next(_fresh_token))
                    if r.first_token_ns is None:
                        r.first_token_ns = end
                if r.generated >= r.osl:
                    r.done_ns = end
                    self.running.remove(r)
                    self._release(r)
        return end


def simulate(requests, **engine):
    worker = Worker(**engine)
    pending = sorted(requests, key=lambda r: (r.arrival_ns, r.row))
    now, k = 0, 0
    while k < len(pending) or worker.running or worker.waiting:
        if not worker.running and not worker.waiting:
            now = max(now, pending[k].arrival_ns)
        while k < len(pending) and pending[k].arrival_ns <= now:
            worker.waiting.append(pending[k])
            k += 1
        now = worker.run_pass(now)
    return requests


def load_requests(trace_path):
    rows = [json.loads(line) for line in open(trace_path) if line.strip()]
    base = min(float(r.get("timestamp", 0.0)) for r in rows)
    out = []
    for i, r in enumerate(rows):
        prompt = [t for h in r["hash_ids"] for t in [h] * TRACE_BLOCK][: r["input_length"]]
        arrival_ns = round((float(r.get("timestamp", 0.0)) + i * 1e-6 - base) * 1e6)
        out.append(Request(i, arrival_ns, r["input_length"], r["output_length"], prompt))
    return out


def engine_args(path):
    e = json.load(open(path)).get("engine", {})
    return dict(num_gpu_blocks=e.get("num_gpu_blocks", 16384), block_size=e.get("block_size", 64),
                max_num_seqs=e.get("max_num_seqs", 256),
                max_num_batched_tokens=e.get("max_num_batched_tokens", 8192),
                enable_prefix_caching=e.get("enable_prefix_caching", True),
                lifo=e.get("preemption_mode", "lifo") == "lifo",
                enable_chunked_prefill=e.get("enable_chunked_prefill", True))


def main():
    d = sys.argv[1]
    reqs = simulate(load_requests(os.path.join(d, "trace.jsonl")),
                    **engine_args(os.path.join(d, "engine.json")))
    ms = lambda ns: "" if ns is None else ns / 1e6
    ours = [[r.row, ms(r.admissions[0][0]), ms(r.first_token_ns), ms(r.done_ns), max(c for _, c in r.admissions)]
            for r in reqs]
    ref_path = os.path.join(d, "dynamo.csv")
    if not os.path.exists(ref_path):
        csv.writer(sys.stdout).writerows(ours)
        return
    bad = 0
    for mine, ref in zip(ours, csv.DictReader(open(ref_path))):
        theirs = [ref["admit_ms"], ref["first_token_ms"], ref["completion_ms"]]
        for a, b in zip(mine[1:4], theirs):
            if (a == "") != (b == "") or (a != "" and abs(a - float(b)) > 1e-6):
                bad += 1
        if mine[4] != int(ref["reused_input_tokens"]):
            bad += 1
    print(f"{d}: {len(ours)} rows, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
