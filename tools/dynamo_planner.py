#!/usr/bin/env python3
"""Dynamo 1.6.1's own planner as a routersim scaling policy (run it through tools/dynamo-planner,
which provides the Python environment it needs):

  routersim replay ... --scaling-policy "tools/dynamo-planner PLANNER.yaml"
  tools/dynamo-replay ... --scaling-policy "tools/dynamo-planner PLANNER.yaml"

The process speaks routersim's JSON lines: to {"call": "initial_tick_ms"} it answers
{"initial_tick_ms": MS|null}; to {"call": "on_tick", "snapshot": {...}} (1.6.1's snapshot) it
answers {"target_prefill": N|null, "target_decode": N|null, "next_tick_ms": MS|null}. Each answer
is the planner's: the adapter of 1.6.1's offline replay (dynamo.replay.planner's
planner_replay_adapter, the one dynamo.replay runs in the loop with planner_config=...) is given
the snapshot exactly as it arrived and asked, as 1.6.1's replay asks it. It exits 0 at the end of
its input.

PLANNER.yaml (YAML or JSON) holds PlannerConfig keys as Dynamo's planner takes them, e.g.
  optimization_target: load       # throughput | latency | load | sla
  load_adjustment_interval_seconds: 5
  decode_scale_up_kv_rate: 0.6
  decode_scale_down_kv_rate: 0.2
  min_endpoint: 1
  max_gpu_budget: 8
As for an offline replay, environment: virtual, backend: mocker and advisory: true are set (a
note on stderr says when a given environment or backend is replaced), and unless given
pre_deployment_sweeping_mode: none, report_interval_hours: null, live_dashboard_port: 0,
control_api_port: 0, and mode: disagg when the prefill and decode engine variables below are
set, else agg.

Environment (routersim sets the engine variables for the policy process):
  ROUTERSIM_ENGINE_ARGS          aggregated workers' engine launch config (1.6.1's JSON, e.g.
                                 {"engine": {"backend": "vllm", "block_size": 64,
                                 "num_gpu_blocks": 16384, "max_num_seqs": 256, ...},
                                 "dp_size": 1, "tensor_parallel_size": 1, "startup_time": 0})
  ROUTERSIM_PREFILL_ENGINE_ARGS  disaggregated serving: the prefill workers' config (with
  ROUTERSIM_DECODE_ENGINE_ARGS   the decode workers'); worker_type defaults to the role
  The planner reads the worker capabilities from them: engine.num_gpu_blocks * block_size *
  dp_size (KV tokens), max_num_seqs, max_num_batched_tokens, max_model_len, aic_nextn,
  tensor_parallel_size, and a timing_model of AIS/AIC (the sla target's regression). Without
  them it uses Dynamo's default engine (a note on stderr says so).
  SNAPSHOTS                      a file: each on_tick question line is appended to it
  DECISIONS                      a file: each answer line is appended to it

Exit status: 0 at the end of input; 1 the planner failed or the protocol was broken (the
message names the tick); 2 bad usage, an unreadable or invalid PLANNER.yaml or engine variable.
"""
import argparse
import json
import math
import numbers
import os
import sys

PROG = "dynamo-planner"
ENGINE_VARS = ("ROUTERSIM_ENGINE_ARGS", "ROUTERSIM_PREFILL_ENGINE_ARGS",
               "ROUTERSIM_DECODE_ENGINE_ARGS")


class ConfigError(Exception):
    """A PLANNER.yaml or an engine variable that cannot be used (exit 2)."""


class PlannerFailure(Exception):
    """The planner raised (exit 1)."""


class ProtocolError(Exception):
    """A question that is not routersim's protocol, or an answer that cannot be sent (exit 1)."""


# ----- configuration (shared with tools/dynamo-replay --planner) ------------------------------

def load_planner_file(path):
    """PLANNER.yaml's mapping (YAML or JSON)."""
    import yaml
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}")
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not YAML or JSON ({e})")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: must hold a mapping of PlannerConfig keys, "
                          f"not a {type(config).__name__}")
    return config


def offline_config(config, disaggregated, prog=PROG):
    """The planner configuration as an offline replay runs it (a copy of `config`)."""
    config = dict(config)
    for key, value in (("environment", "virtual"), ("backend", "mocker")):
        if config.get(key, value) != value:
            print(f"{prog}: planner {key} {config[key]!r} replaced by {value!r} (offline replay)",
                  file=sys.stderr)
        config[key] = value
    config["advisory"] = True
    config.setdefault("pre_deployment_sweeping_mode", "none")
    config.setdefault("mode", "disagg" if disaggregated else "agg")
    config.setdefault("report_interval_hours", None)
    config.setdefault("live_dashboard_port", 0)
    config.setdefault("control_api_port", 0)
    return config


def warn_unknown_keys(config, path, prog=PROG):
    """A note on stderr for each top-level key that is no PlannerConfig field: Dynamo's planner
    ignores such a key (a misspelt one would otherwise go unnoticed)."""
    from dynamo.planner.config.planner_config import PlannerConfig
    known = set()
    for name, field in PlannerConfig.model_fields.items():
        known.update(k for k in (name, field.alias, field.validation_alias) if isinstance(k, str))
    for key in config:
        if key not in known:
            print(f"{prog}: {path}: {key!r} is no PlannerConfig key; the planner ignores it",
                  file=sys.stderr)


def engine_from_env(name):
    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{name}: not JSON ({e})")
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: must be a JSON object (an engine launch config)")
    return value


def engine_args_from_env(mode):
    """(extra, prefill, decode) engine args for the adapter, from the environment."""
    extra, prefill, decode = (engine_from_env(name) for name in ENGINE_VARS)
    if (prefill is None) != (decode is None):
        given, missing = ENGINE_VARS[1:] if prefill is not None else ENGINE_VARS[:0:-1]
        raise ConfigError(f"{given} is set but {missing} is not: give both "
                          "(disaggregated serving) or neither")
    for args, role in ((prefill, "prefill"), (decode, "decode")):
        if args is not None and isinstance(args.get("engine", {}), dict):
            args.setdefault("engine", {}).setdefault("worker_type", role)
    if mode == "agg" and extra is None:
        print(f"{PROG}: {ENGINE_VARS[0]} is not set: the planner assumes Dynamo's default "
              "engine", file=sys.stderr)
    if mode == "disagg" and prefill is None:
        print(f"{PROG}: {ENGINE_VARS[1]} and {ENGINE_VARS[2]} are not set: the planner assumes "
              "Dynamo's default engine for both", file=sys.stderr)
        prefill = {"engine": {"worker_type": "prefill"}}
        decode = {"engine": {"worker_type": "decode"}}
    return extra, prefill, decode


# ----- answers (shared with tools/dynamo-replay --planner) ------------------------------------

def _target(value, key):
    if value is None:
        return None
    if isinstance(value, bool):
        raise ProtocolError(f"the planner's {key} is {value!r}, not a count")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(float(value)) \
            and float(value).is_integer():
        return int(float(value))
    raise ProtocolError(f"the planner's {key} is {value!r}, not a whole number")


def _time_ms(value, key):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProtocolError(f"the planner's {key} is {value!r}, not a number")
    value = float(value)
    return value if math.isfinite(value) else None


def answer(decision):
    """The planner's decision as routersim's answer: the three keys, ints or null for the
    targets, a float or null (also for a non-finite time) for the next tick."""
    if not isinstance(decision, dict):
        raise ProtocolError(f"the planner answered {decision!r}, not a mapping")
    return {"target_prefill": _target(decision.get("target_prefill"), "target_prefill"),
            "target_decode": _target(decision.get("target_decode"), "target_decode"),
            "next_tick_ms": _time_ms(decision.get("next_tick_ms"), "next_tick_ms")}


def scaling_reason(snapshot, reply):
    """Why the planner changed a target, in the words of its own scaling events
    ("scale_up", "scale_down"; "rebalance" when one role grows as the other shrinks), or
    None when it changed nothing. Derived from the snapshot's non-draining counts, which is
    what the planner compares its targets with; routersim keeps it in scaling.csv."""
    if not isinstance(snapshot, dict):
        return None
    roles = [("target_decode", "non_draining_decode_count")]
    if snapshot.get("non_draining_prefill_count") or snapshot.get("active_prefill_ids"):
        roles.append(("target_prefill", "non_draining_prefill_count"))
    moves = set()
    for target_key, count_key in roles:
        target, count = reply.get(target_key), snapshot.get(count_key)
        if target is not None and isinstance(count, int) and target != count:
            moves.add("scale_up" if target > count else "scale_down")
    if not moves:
        return None
    return moves.pop() if len(moves) == 1 else "rebalance"


def append_line(variable, line):
    """Appends `line` to the file the environment variable names, if it names one."""
    path = os.environ.get(variable)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


# ----- the process ----------------------------------------------------------------------------

def tick_name(snapshot):
    if not isinstance(snapshot, dict):
        return "a tick"
    return f"tick {snapshot.get('tick_ordinal')} (now_ms {snapshot.get('now_ms')})"


def serve(adapter, questions, send):
    """Answers each question line until the input ends."""
    for number, line in enumerate(iter(questions.readline, ""), 1):
        line = line.rstrip("\n")
        if not line.strip():
            continue
        try:
            question = json.loads(line)
        except json.JSONDecodeError as e:
            raise ProtocolError(f"question {number} is not JSON ({e}): {line[:200]}")
        call = question.get("call") if isinstance(question, dict) else None
        if call == "initial_tick_ms":
            try:
                first = adapter.initial_tick_ms()
            except Exception as e:
                raise PlannerFailure(f"the planner failed on initial_tick_ms: "
                                     f"{type(e).__name__}: {e}")
            send({"initial_tick_ms": _time_ms(first, "initial_tick_ms")})
        elif call == "on_tick":
            if "snapshot" not in question:
                raise ProtocolError(f"question {number}: on_tick without a snapshot")
            append_line("SNAPSHOTS", line)
            snapshot = question["snapshot"]
            try:
                decision = adapter.on_tick(snapshot)
            except Exception as e:
                raise PlannerFailure(f"the planner failed on {tick_name(snapshot)}: "
                                     f"{type(e).__name__}: {e}")
            try:
                reply = answer(decision)
            except ProtocolError as e:
                raise ProtocolError(f"{tick_name(snapshot)}: {e}")
            append_line("DECISIONS", json.dumps(reply))
            reason = scaling_reason(snapshot, reply)
            send({**reply, "reason": reason} if reason else reply)
        else:
            raise ProtocolError(f"question {number} asks for {call!r}: expected "
                                "\"initial_tick_ms\" or \"on_tick\"")


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("planner", metavar="PLANNER.yaml",
                   help="PlannerConfig keys of Dynamo 1.6.1's planner (YAML or JSON)")
    a = p.parse_args(argv)

    # The protocol owns the real stdout; anything else that writes there (Dynamo's Python or
    # native code) goes to stderr instead.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(reply):
        protocol.write(json.dumps(reply) + "\n")
        protocol.flush()

    try:
        from dynamo.replay.planner import planner_replay_adapter
    except ImportError as e:
        sys.exit(f"{PROG}: this Python lacks ai-dynamo 1.6.1's planner ({e}); "
                 "run tools/dynamo-planner, which installs it")
    try:
        disaggregated = any(os.environ.get(v, "").strip() for v in ENGINE_VARS[1:])
        config = offline_config(load_planner_file(a.planner), disaggregated)
        warn_unknown_keys(config, a.planner)
        extra, prefill, decode = engine_args_from_env(config.get("mode"))
    except ConfigError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    try:
        scope = planner_replay_adapter(extra, prefill, decode, json.dumps(config))
        adapter = scope.__enter__()
    except Exception as e:  # PlannerConfig validation, engine args the planner refuses
        print(f"{PROG}: {a.planner}: the planner refused its configuration: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        return 2
    status = 0
    try:
        serve(adapter, sys.stdin, send)
    except (PlannerFailure, ProtocolError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        status = 1
    except BrokenPipeError:
        status = 1  # the simulator went away mid-answer; it reports that itself
    except OSError as e:  # SNAPSHOTS or DECISIONS could not be written
        print(f"{PROG}: {e.filename}: {e.strerror}", file=sys.stderr)
        status = 1
    finally:
        try:
            scope.__exit__(None, None, None)
        except Exception as e:
            print(f"{PROG}: the planner's cleanup failed: {e}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
