#!/usr/bin/env python3
"""Differential fuzzer: routersim's `replay` against Dynamo 1.6.1's offline replay, row by row.

Each seed draws one small random case: a trace of 3 to 40 rows (prefix groups that share
hash ids so caches matter, bursts and gaps, some rows with a policy_class, priority or
strict_priority), an engine config (`{"engine": {...}, "dp_size": N}`: num_gpu_blocks down to
tiny pools that preempt, max_num_batched_tokens, max_num_seqs, enable_prefix_caching,
preemption_mode, dp_size 1 or 2), a router config (router_queue_threshold absent or a value,
router_queue_policy fcfs/wspt, use_kv_events true/false, overlap_score_weight), maybe a
policy-class YAML, and a topology: `1` (one worker), `rr2` (two workers, --router-mode
round_robin) or `kv2` (two workers, the default kv_router). Dynamo runs the case twice
through the driver; if its two outputs differ (exact cost ties are broken at random by an
unseeded generator in 1.6.1) the case is counted as nondeterministic and not compared.
routersim then replays the driver's tagged trace (dynamo.trace.jsonl) with the same inputs,
and its requests.csv is compared with Dynamo's as tests/it/fidelity.rs does: arrival, admit,
first-token and completion times within 0.001 ms; path, status, reused_input_tokens,
input_length, output_length, policy_class exact. Workers are compared like with like: the
driver's `worker` column is Dynamo's decode_worker_idx, which for dp_size > 1 is the global
rank `worker * dp_size + dp_rank`, so routersim's `worker` and `dp_rank` are folded the same
way before comparing (the driver's own dp_rank column is checked against its worker).
Under the kv_router with several ranks (kv2, or dp_size 2 on one worker) the first request on
an idle fleet always meets an exact tie, so workers are renamed in order of first use (and
each worker's ranks likewise) on every side before comparing, Dynamo's two runs included:
interchangeable idle workers make that choice arbitrary, and only later ties, where the
fleet is no longer symmetric, count as nondeterminism. When routersim disagrees with two
equal Dynamo runs in those topologies, Dynamo runs up to ten more times; another outcome
makes the case nondeterministic after all (the line says whether routersim matched it).

How to run. From the repository root, with a routersim binary and a Dynamo driver:

    ROUTERSIM=target/release/routersim DYNAMO_REPLAY=/path/to/dynosim \\
        python3 tools/differential_fuzz.py OUT_DIR FIRST_SEED COUNT [--topology 1|rr2|kv2|all]
        [--jobs N] [--isolate]

ROUTERSIM defaults to target/release/routersim; DYNAMO_REPLAY to tools/dynamo-replay (which
installs ai-dynamo-runtime 1.6.1 into a cache on first use unless the running Python has it).
`--topology all` (the default) takes 1, rr2 and kv2 in turn by seed. Each case is written to
OUT_DIR/<seed>/: trace.jsonl, engine.json, router.json, policy.yaml (when drawn), args.txt
(the topology's flags), dynamo.csv and dynamo.trace.jsonl, dynamo-2.csv, rs/ (routersim's
output) and diff.txt (every differing field, or the two Dynamo runs' differences). One line
per case is printed (seed, topology, settings, then `agree`, `DIFFER` with the first differing
row, `nondeterministic`, `routersim error` or `dynamo error`), then a tally; the exit status
is 1 if any case differs. `--jobs` runs that many cases at once (default 2, at most 2).
`--isolate` reruns every differing case with each suspect setting taken out on both sides
(dp_size 2 -> 1, use_kv_events false -> true, router_queue_threshold dropped) and names the
settings whose removal makes it agree; a case that still differs with all of them out is
reported as unexplained. `--shrink CASE_DIR OUT_DIR` instead removes rows (and then the policy
file and router keys) from one differing case while it keeps differing deterministically, and
writes the smallest case found to OUT_DIR.
"""
import argparse
import concurrent.futures
import copy
import csv
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DYNAMO_REPLAY = os.environ.get("DYNAMO_REPLAY", os.path.join(HERE, "dynamo-replay"))
ROUTERSIM = os.environ.get("ROUTERSIM", os.path.join(ROOT, "target", "release", "routersim"))
TOLERANCE_MS = 0.001
TIMES = ["arrival_ms", "admit_ms", "first_token_ms", "completion_ms"]
EXACT = ["path", "status", "reused_input_tokens", "input_length", "output_length", "policy_class"]
TOPOLOGIES = {"1": [], "rr2": ["--workers", "2", "--router-mode", "round_robin"],
              "kv2": ["--workers", "2"]}
EXTRA_DYNAMO_RUNS = 10  # seed 275 of the first sweep differed in only 3 of 12 runs


# ----- drawing a case -------------------------------------------------------------------------

def random_policy(rng):
    """A policy-class YAML in 1.6.1's family/bucket schema, and the class names rows may carry
    (including the empty name and one no class has)."""
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


def topology_of(seed, choice):
    return ["1", "rr2", "kv2"][seed % 3] if choice == "all" else choice


def build_case(seed, topology):
    """The case of `seed`: (engine, router, policy YAML or None, rows, topology)."""
    rng = random.Random(seed)
    num_blocks = rng.choice([24, 40, 64, 100, 200, 16384])
    engine = {"backend": "vllm", "worker_type": "aggregated", "num_gpu_blocks": num_blocks,
              "max_num_batched_tokens": rng.choice([256, 1024, 2048, 8192]),
              "max_num_seqs": rng.choice([1, 2, 4, 8, 16, 256]),
              "enable_prefix_caching": rng.random() < 0.7,
              "preemption_mode": "lifo" if rng.random() < 0.7 else "fifo"}
    engine_config = {"engine": engine, "dp_size": 2 if rng.random() < 0.25 else 1}
    router = {}
    if rng.random() < 0.5:
        router["router_queue_threshold"] = rng.choice([0.0, 0.1, 0.2, 0.5, 1.0, 2.0])
    if rng.random() < 0.5:
        router["router_queue_policy"] = rng.choice(["fcfs", "wspt"])
    u = rng.random()
    if u < 0.2:
        router["use_kv_events"] = False
    elif u < 0.4:
        router["use_kv_events"] = True
    if rng.random() < 0.3:
        router["overlap_score_weight"] = rng.choice([0.0, 0.5, 1.0, 2.0])
    policy, names = random_policy(rng) if rng.random() < 0.5 else (None, [""])
    queued = policy is not None or "router_queue_threshold" in router
    shared = [[800_000 + 10 * g + j for j in range(8)] for g in range(3)]
    rows, t_ms = [], 0.0
    for i in range(rng.randint(3, 40)):
        isl = rng.randint(1, min(4000, num_blocks * 64 // 3))
        osl = rng.randint(0 if rng.random() < 0.05 else 1, rng.choice([2, 50, 300]))
        n = (isl + 511) // 512
        own = [seed * 100_000 + i * 10 + j for j in range(n)]
        ids = (rng.choice(shared) + own)[:n] if rng.random() < 0.4 else own
        row = {"timestamp": round(t_ms, 3), "input_length": isl, "output_length": osl,
               "hash_ids": ids}
        cls = rng.choice(names)
        if cls:
            row["policy_class"] = cls
        if queued and rng.random() < 0.2:
            row["priority"] = rng.randint(-2, 3)
        if policy and rng.random() < 0.1:
            row["strict_priority"] = rng.randint(0, 2)
        rows.append(row)
        if rng.random() >= 0.25:  # else a burst: the next row at the same ms
            t_ms += rng.expovariate(rng.choice([10, 40, 100])) * 1000.0
    return engine_config, router, policy, rows, topology


def settings_text(case):
    engine_config, router, policy, rows, topology = case
    e = engine_config["engine"]
    parts = [f"topo={topology}", f"rows={len(rows)}", f"dp={engine_config.get('dp_size', 1)}",
             f"blocks={e['num_gpu_blocks']}", f"mbt={e['max_num_batched_tokens']}",
             f"seqs={e['max_num_seqs']}", f"pc={int(e['enable_prefix_caching'])}",
             e["preemption_mode"]]
    short = {"router_queue_threshold": "thr", "router_queue_policy": "qp",
             "use_kv_events": "kvev", "overlap_score_weight": "osw"}
    parts += [f"{short[k]}={v}" for k, v in router.items()]
    if policy:
        parts.append("policy")
    return " ".join(parts)


def write_case(d, case):
    engine_config, router, policy, rows, topology = case
    os.makedirs(d, exist_ok=True)
    for name in ["policy.yaml", "router.json"]:  # a rerun into the same dir starts clean
        if os.path.exists(os.path.join(d, name)):
            os.remove(os.path.join(d, name))
    with open(os.path.join(d, "trace.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(d, "engine.json"), "w") as f:
        json.dump(engine_config, f)
    if router:
        with open(os.path.join(d, "router.json"), "w") as f:
            json.dump(router, f)
    if policy:
        with open(os.path.join(d, "policy.yaml"), "w") as f:
            f.write(policy)
    with open(os.path.join(d, "args.txt"), "w") as f:
        f.write(" ".join(TOPOLOGIES[topology]) + "\n")


def read_case(d):
    """A case back from its directory (as write_case wrote it)."""
    with open(os.path.join(d, "trace.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(os.path.join(d, "engine.json")) as f:
        engine_config = json.load(f)
    router = {}
    if os.path.exists(os.path.join(d, "router.json")):
        with open(os.path.join(d, "router.json")) as f:
            router = json.load(f)
    policy = None
    if os.path.exists(os.path.join(d, "policy.yaml")):
        with open(os.path.join(d, "policy.yaml")) as f:
            policy = f.read()
    with open(os.path.join(d, "args.txt")) as f:
        flags = f.read().split()
    topology = next(t for t, fl in TOPOLOGIES.items() if fl == flags)
    return engine_config, router, policy, rows, topology


# ----- running both sides ---------------------------------------------------------------------

def input_flags(d):
    flags = ["--engine", f"{d}/engine.json"]
    if os.path.exists(f"{d}/policy.yaml"):
        flags += ["--policy", f"{d}/policy.yaml"]
    if os.path.exists(f"{d}/router.json"):
        flags += ["--router", f"{d}/router.json"]
    with open(f"{d}/args.txt") as f:
        return flags + f.read().split()


def last_line(text):
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "?"


def run_dynamo(d, name):
    """Runs the driver into d/name.csv; returns None or its error."""
    run = subprocess.run([DYNAMO_REPLAY, "--trace", f"{d}/trace.jsonl", "--out", f"{d}/{name}.csv",
                          "--tagged-trace", f"{d}/{name}.trace.jsonl"] + input_flags(d),
                         capture_output=True, text=True)
    return last_line(run.stderr) if run.returncode else None


def run_routersim(d):
    out = f"{d}/rs"
    if os.path.exists(out):
        shutil.rmtree(out)
    run = subprocess.run([ROUTERSIM, "replay", "--trace", f"{d}/dynamo.trace.jsonl", "--out", out,
                          "--quiet", "--no-report"] + input_flags(d),
                         capture_output=True, text=True)
    return last_line(run.stderr + run.stdout) if run.returncode else None


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def time_differs(ours, theirs):
    if ours == "" or theirs == "":
        return ours != theirs
    return abs(float(ours) - float(theirs)) > TOLERANCE_MS


def placements(rows, dp_size, ours, relabel):
    """Each row's (worker, rank), or None for a row never placed. Dynamo's `worker` is the
    global rank worker * dp_size + dp_rank; routersim prints the worker and the rank apart.
    With `relabel`, workers are renamed in order of first appearance, and each worker's ranks
    likewise: identical idle workers (ranks) are interchangeable, so this drops the arbitrary
    choice of a random tie-break among them and nothing else."""
    out = []
    for row in rows:
        if row["worker"] == "":
            out.append(None)
        elif ours:
            out.append((int(row["worker"]), int(row["dp_rank"] or 0)))
        else:
            out.append(divmod(int(row["worker"]), dp_size))
    if not relabel:
        return out
    workers, ranks, renamed = {}, {}, []
    for p in out:
        if p is None:
            renamed.append(None)
            continue
        w = workers.setdefault(p[0], len(workers))
        r = ranks.setdefault(p, sum(1 for q in ranks if q[0] == p[0]))
        renamed.append((w, r))
    return renamed


def mismatches(ours, dynamo, dp_size, relabel, ours_is_routersim=True):
    """Every differing field, described ("row R: column ours vs Dynamo theirs")."""
    if len(ours) != len(dynamo):
        return [f"row counts differ: {len(ours)} vs Dynamo {len(dynamo)}"]
    mine = placements(ours, dp_size, ours_is_routersim, relabel)
    theirs = placements(dynamo, dp_size, False, relabel)
    out = []
    for o, d, po, pd in zip(ours, dynamo, mine, theirs):
        if o["row"] != d["row"]:
            return out + [f"row order differs: row {o['row']} vs Dynamo {d['row']}"]
        r = o["row"]
        for c in TIMES:
            if time_differs(o[c], d[c]):
                out.append(f"row {r}: {c} {o[c]} vs Dynamo {d[c]}")
        for c in EXACT:
            if o[c] != d[c]:
                out.append(f"row {r}: {c} {o[c]} vs Dynamo {d[c]}")
        if po != pd:
            out.append(f"row {r}: worker/rank {po} vs Dynamo {pd}"
                       + (" (relabelled by first use)" if relabel else "")
                       + f", as printed: worker {o['worker']} rank {o['dp_rank']} vs Dynamo "
                       f"worker {d['worker']} rank {d['dp_rank']}")
        # The driver's dp_rank column is its own record of the rank: check it agrees.
        if not ours_is_routersim or d["dp_rank"] == "" or pd is None:
            continue
        if int(d["dp_rank"]) != int(d["worker"]) % dp_size:
            out.append(f"row {r}: Dynamo's dp_rank {d['dp_rank']} is not its worker "
                       f"{d['worker']} mod dp_size {dp_size}")
    return out


def relabels(case):
    """Whether worker names are arbitrary: several ranks under the kv_router, whose exact
    cost ties (first of all, the first request on an idle fleet) 1.6.1 breaks at random."""
    engine_config, _, _, _, topology = case
    return topology == "kv2" or (topology == "1" and engine_config.get("dp_size", 1) > 1)


def run_case(d, case):
    """Runs a written case; returns (outcome, detail, lines for diff.txt). outcome is one of
    agree, differ, nondeterministic, routersim error, dynamo error."""
    dp, relabel = case[0].get("dp_size", 1), relabels(case)
    for name in ["dynamo", "dynamo-2"]:
        err = run_dynamo(d, name)
        if err:
            return "dynamo error", err, [f"dynamo-replay ({name}): {err}"]
    first = read_csv(f"{d}/dynamo.csv")
    diff = mismatches(read_csv(f"{d}/dynamo-2.csv"), first, dp, relabel, False)
    if diff:
        return ("nondeterministic", f"run 2: {diff[0]}",
                ["Dynamo's run 2 differs from run 1:"] + diff)
    err = run_routersim(d)
    if err:
        return "routersim error", err, [f"routersim: {err}"]
    ours = read_csv(f"{d}/rs/requests.csv")
    bad = mismatches(ours, first, dp, relabel)
    if not bad:
        return "agree", "", ["agree"]
    if relabel or case[4] == "kv2":
        # Two equal runs may still hide a random tie-break: look again before calling it.
        for k in range(3, 3 + EXTRA_DYNAMO_RUNS):
            name = f"dynamo-{k}"
            if run_dynamo(d, name):
                break
            other = read_csv(f"{d}/{name}.csv")
            diff = mismatches(other, first, dp, relabel, False)
            if diff:
                matched = not mismatches(ours, other, dp, relabel)
                return ("nondeterministic",
                        f"run {k}: {diff[0]}; routersim matches "
                        + (f"run {k}" if matched else "neither run"),
                        [f"Dynamo's run {k} differs from run 1:"] + diff
                        + ["routersim vs run 1:"] + bad)
    return "differ", bad[0], bad


# ----- one seed, isolation, shrinking ---------------------------------------------------------

SUSPECTS = ["dp_size", "use_kv_events", "router_queue_threshold"]


def suspects_of(case):
    engine_config, router, _, _, _ = case
    found = []
    if engine_config.get("dp_size", 1) > 1:
        found.append("dp_size")
    if router.get("use_kv_events") is False:
        found.append("use_kv_events")
    if "router_queue_threshold" in router:
        found.append("router_queue_threshold")
    return found


def without(case, names):
    engine_config, router, policy, rows, topology = copy.deepcopy(case)
    if "dp_size" in names:
        engine_config["dp_size"] = 1
    if "use_kv_events" in names:
        router.pop("use_kv_events", None)
    if "router_queue_threshold" in names:
        router.pop("router_queue_threshold", None)
    return engine_config, router, policy, rows, topology


def isolate(d, case):
    """Reruns a differing case with suspect settings removed; returns (cause, notes)."""
    found = suspects_of(case)
    if not found:
        return "unexplained", []
    variants = [[s] for s in found] + ([found] if len(found) > 1 else [])
    results, notes = {}, []
    for names in variants:
        vd = os.path.join(d, "without-" + "+".join(names))
        write_case(vd, without(case, names))
        outcome, detail, lines = run_case(vd, without(case, names))
        with open(os.path.join(vd, "diff.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        results[tuple(names)] = outcome
        notes.append(f"without {'+'.join(names)}: {outcome}" + (f" ({detail})" if detail else ""))
    fixes = [s for s in found if results[(s,)] == "agree"]
    if fixes:
        return "+".join(fixes), notes
    if len(found) > 1 and results[tuple(found)] == "agree":
        return "+".join(found) + " (together)", notes
    # Still differing, deterministically, with every suspect out: something else.
    return ("unexplained" if results[tuple(found)] == "differ" else "inconclusive"), notes


def one_seed(out_dir, seed, topology_choice, with_isolate):
    case = build_case(seed, topology_of(seed, topology_choice))
    d = os.path.join(out_dir, str(seed))
    write_case(d, case)
    outcome, detail, lines = run_case(d, case)
    cause, notes = None, []
    if outcome == "differ" and with_isolate:
        cause, notes = isolate(d, case)
    with open(os.path.join(d, "diff.txt"), "w") as f:
        f.write("\n".join(lines + ([f"cause: {cause}"] + notes if cause else [])) + "\n")
    with open(os.path.join(d, "result.json"), "w") as f:
        json.dump({"seed": seed, "outcome": outcome, "detail": detail, "cause": cause,
                   "suspects": suspects_of(case), "settings": settings_text(case),
                   "isolation": notes}, f, indent=1)
    line = f"{seed} {settings_text(case)}: {outcome.upper() if outcome == 'differ' else outcome}"
    if detail:
        line += f": {detail}"
    if cause:
        line += f" [cause: {cause}]"
    return seed, outcome, cause, line


def deterministic_differ(d, case):
    write_case(d, case)
    return run_case(d, case)[0] == "differ"


def shrink(case_dir, out_dir):
    """Removes rows, then the policy and router keys, while the case keeps differing."""
    case = read_case(case_dir)
    work = os.path.join(out_dir, "work")
    if not deterministic_differ(work, case):
        sys.exit(f"{case_dir} does not differ deterministically")
    engine_config, router, policy, rows, topology = case
    chunk = max(1, len(rows) // 2)
    while chunk >= 1:
        i, changed = 0, False
        while i < len(rows):
            trial = rows[:i] + rows[i + chunk:]
            if trial and deterministic_differ(work, (engine_config, router, policy, trial, topology)):
                rows, changed = trial, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    if policy and deterministic_differ(work, (engine_config, router, None, rows, topology)):
        policy = None
    for key in list(router):
        trial = {k: v for k, v in router.items() if k != key}
        if deterministic_differ(work, (engine_config, trial, policy, rows, topology)):
            router = trial
    small = (engine_config, router, policy, rows, topology)
    shutil.rmtree(work)
    write_case(out_dir, small)
    outcome, detail, lines = run_case(out_dir, small)
    with open(os.path.join(out_dir, "diff.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{out_dir}: {len(rows)} rows, {settings_text(small)}: {outcome}: {detail}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", nargs="?")
    p.add_argument("first_seed", nargs="?", type=int)
    p.add_argument("count", nargs="?", type=int)
    p.add_argument("--topology", default="all", choices=["1", "rr2", "kv2", "all"])
    p.add_argument("--jobs", type=int, default=2, choices=[1, 2])
    p.add_argument("--isolate", action="store_true",
                   help="rerun differing cases without each suspect setting")
    p.add_argument("--shrink", nargs=2, metavar=("CASE_DIR", "OUT_DIR"),
                   help="shrink one differing case instead of drawing new ones")
    a = p.parse_args()
    if a.shrink:
        shrink(*a.shrink)
        return
    if a.count is None:
        p.error("give OUT_DIR FIRST_SEED COUNT (or --shrink CASE_DIR OUT_DIR)")
    tally, causes = {}, {}
    seeds = range(a.first_seed, a.first_seed + a.count)
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for seed, outcome, cause, line in pool.map(
                lambda s: one_seed(a.out_dir, s, a.topology, a.isolate), seeds):
            print(line, flush=True)
            tally.setdefault(outcome, []).append(seed)
            if cause:
                causes.setdefault(cause, []).append(seed)
    print("tally: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(tally.items())))
    for k, v in sorted(tally.items()):
        if k != "agree":
            print(f"  {k}: seeds {' '.join(map(str, v))}")
    for k, v in sorted(causes.items()):
        print(f"  differ, cause {k}: seeds {' '.join(map(str, v))}")
    sys.exit(1 if "differ" in tally else 0)


if __name__ == "__main__":
    main()
