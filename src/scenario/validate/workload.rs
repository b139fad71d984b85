//! `workload:` validated: synthetic groups (counts or shares, lengths, arrivals, prefixes,
//! pins), a trace, closed loop and warmup.

use super::{Source, duration_ms, synth_error_path, time_ms, worker_ids};
use crate::bounds::{self, MAX_REQUESTS};
use crate::scenario::bounds_check;
use crate::scenario::raw::{
    RawArrival, RawBurstOrder, RawDist, RawDistKind, RawGroup, RawLength, RawPin, RawProcess,
    RawRatePiece, RawSessions, RawWorkload,
};
use crate::scenario::{ScenarioError, Workload};
use crate::scheduling::policy::PolicyProfile;
use crate::scheduling::types::WorkerWithDpRank;
use crate::sim::{ClosedLoop, WorkerPool};
use crate::time::{SimDuration, SimTime};
use crate::workload::rate_shape::RateShape;
use crate::workload::session_trace::{SessionMode, read_sessions};
use crate::workload::synth::{
    Arrival, Burst, BurstOrder, DEFAULT_MAX_TOKENS, LengthBounds, LengthDist, Lengths, Process,
    RequestGroup, SESSION_TURNS, SessionShape, SharedPrefix, SynthWorkload, THINK_TIME_MS,
};
use crate::workload::trace;
use std::io::BufReader;

pub(super) fn workload(
    source: &Source,
    raw: &RawWorkload,
    profile: &PolicyProfile,
    pools: &[WorkerPool],
) -> Result<Workload, ScenarioError> {
    match (&raw.trace, &raw.groups) {
        (Some(_), Some(_)) => Err(source.at(
            "workload.trace",
            "give either `trace` or `groups`, not both",
        )),
        (None, None) => Err(source.at(
            "workload",
            "the workload is empty: give `groups` or `trace`",
        )),
        (None, Some(groups)) if groups.is_empty() => Err(source.at(
            "workload.groups",
            "the workload is empty: `groups` has no entries",
        )),
        (Some(file), None) => trace_workload(source, raw, file),
        (None, Some(groups)) => {
            if raw.trace_block_size.is_some() {
                return Err(source.at("workload.trace_block_size", "only applies to `trace`"));
            }
            if raw.arrival_speedup_ratio.is_some() {
                return Err(source.at("workload.arrival_speedup_ratio", "only applies to `trace`"));
            }
            for group in groups {
                check_count_or_share(source, group)?;
            }
            let shared = shared_arrivals(source, raw, groups)?;
            let mut converted = Vec::with_capacity(groups.len());
            for group in groups {
                let sizing = sizing(source, group, shared.as_ref())?;
                converted.push(group_of(source, group, sizing, profile, pools)?);
            }
            let synth = SynthWorkload {
                groups: converted,
                burst: burst(source, raw)?,
                tokens_per_hash: pools[0].engine.common.block_size,
            };
            synth
                .validate()
                .map_err(|e| source.at(&synth_error_path(&e), e.message))?;
            Ok(Workload::Synthetic(synth))
        }
    }
}

fn trace_workload(
    source: &Source,
    raw: &RawWorkload,
    file: &str,
) -> Result<Workload, ScenarioError> {
    if raw.burst.is_some() {
        return Err(source.at("workload.burst", "only applies to `groups`"));
    }
    let only_groups = [
        ("rate_per_s", raw.rate_per_s.is_some()),
        ("arrival", raw.arrival.is_some()),
        (
            "duration_s",
            raw.duration_s.is_some() && raw.concurrency.is_none(),
        ),
    ];
    if let Some((field, _)) = only_groups.iter().find(|(_, given)| *given) {
        return Err(source.at(
            &format!("workload.{field}"),
            "only applies to `groups` with `share` (or, for `duration_s`, to a closed loop)",
        ));
    }
    let block_size = raw
        .trace_block_size
        .unwrap_or(trace::DEFAULT_TRACE_BLOCK_SIZE);
    let block_size = bounds_check::trace_block_size(block_size)
        .map_err(|message| source.at("workload.trace_block_size", message))?;
    let arrival_speedup_ratio = arrival_speedup_ratio(source, raw)?;
    let path = source.resolve(file);
    let name = path.display().to_string();
    let open = || {
        bounds::open_regular(&path)
            .map(BufReader::new)
            .map_err(|e| source.at("workload.trace", format!("cannot read {name}: {e}")))
    };
    let summary = trace::scan_scaled(open()?, &name, block_size, arrival_speedup_ratio)?;
    if summary.sessions {
        // A session trace's own rules (grouping, think times, start times) are checked
        // whole too, so that a bad one is refused before anything runs.
        let mode = match raw.concurrency {
            Some(_) => SessionMode::ClosedLoop,
            None => SessionMode::Trace {
                speedup_ratio: arrival_speedup_ratio,
            },
        };
        read_sessions(trace::TraceReader::new(open()?, &name, block_size), mode)?;
    }
    Ok(Workload::Trace {
        path,
        block_size,
        arrival_speedup_ratio,
        surplus_hash_ids: summary.surplus_hash_ids,
    })
}

/// `workload.arrival_speedup_ratio` of a trace (default 1). A closed loop ignores timestamps,
/// so the two together are refused rather than one silently doing nothing.
fn arrival_speedup_ratio(source: &Source, raw: &RawWorkload) -> Result<f64, ScenarioError> {
    let Some(ratio) = raw.arrival_speedup_ratio else {
        return Ok(1.0);
    };
    let field = "workload.arrival_speedup_ratio";
    if raw.concurrency.is_some() {
        return Err(source.at(
            field,
            "has no effect with `concurrency`: a closed loop ignores the trace's timestamps",
        ));
    }
    trace::check_speedup_ratio(ratio).map_err(|message| source.at(field, message))
}

fn burst(source: &Source, raw: &RawWorkload) -> Result<Burst, ScenarioError> {
    let Some(b) = &raw.burst else {
        return Ok(Burst::default());
    };
    Ok(Burst {
        at: time_ms(source, "workload.burst.at_ms", b.at_ms)?,
        order: match b.order {
            None | Some(RawBurstOrder::Sequential) => BurstOrder::Sequential,
            Some(RawBurstOrder::RoundRobin) => BurstOrder::RoundRobin,
            Some(RawBurstOrder::Alternate) => BurstOrder::Alternate,
        },
        spacing_ns: b.spacing_ns,
    })
}

/// Groups whose shares must add up to 1 do so within this (shares are decimal fractions).
const SHARE_SUM_TOLERANCE: f64 = 1e-9;

/// How the groups with `share` arrive: `workload.arrival` at `rate_per_s × share` from 0,
/// every arrival before `duration_s`.
struct SharedArrivals {
    process: Process,
    rate_per_s: f64,
    /// The load offered over the window, in seconds at `rate_per_s` (the window's length
    /// without a shape).
    load_s: f64,
    until: SimTime,
    shape: Option<RateShape>,
}

/// How many requests a group has and when they arrive.
struct Sizing {
    /// The exact count, or for a shared group the expected one (rounded down).
    count: u64,
    /// The group's own `arrival`, or its share of the workload's.
    arrival: Arrival,
}

/// A group has `count` or `share`, never both nor neither; a shared group's arrivals are the
/// workload's, so it has no `arrival` of its own.
fn check_count_or_share(source: &Source, group: &RawGroup) -> Result<(), ScenarioError> {
    let path = |field: &str| format!("workload.groups.\"{}\".{field}", group.name);
    match (group.count, group.share) {
        (Some(_), Some(_)) => Err(source.at(
            &path("share"),
            "a group has `share` or `count`, not both",
        )),
        (None, None) => Err(source.at(
            &path("count"),
            "give `count`, or `share` of `workload.rate_per_s` (with `workload.duration_s`)",
        )),
        (None, Some(_)) if group.arrival.is_some() => Err(source.at(
            &path("arrival"),
            "a group with `share` arrives by `workload.arrival`; give `count` for arrivals of its own",
        )),
        (None, Some(share)) if !(share.is_finite() && share > 0.0 && share <= 1.0) => Err(
            source.at(&path("share"), format!("must be in (0, 1], got {share:?}")),
        ),
        _ => Ok(()),
    }
}

/// The arrivals of the groups with `share`, from `workload.rate_per_s`, `duration_s` and
/// `arrival`: `None` when no group has a share (then those fields are errors, except
/// `duration_s` bounding a closed loop).
fn shared_arrivals(
    source: &Source,
    raw: &RawWorkload,
    groups: &[RawGroup],
) -> Result<Option<SharedArrivals>, ScenarioError> {
    let shared: Vec<&RawGroup> = groups.iter().filter(|g| g.share.is_some()).collect();
    if shared.is_empty() {
        let unused = [
            ("rate_per_s", raw.rate_per_s.is_some()),
            ("arrival", raw.arrival.is_some()),
            ("rate_shape", raw.rate_shape.is_some()),
            (
                "duration_s",
                raw.duration_s.is_some() && raw.concurrency.is_none(),
            ),
        ];
        return match unused.iter().find(|(_, given)| *given) {
            Some((field, _)) => Err(source.at(
                &format!("workload.{field}"),
                "applies to groups with `share` (or, for `duration_s`, to a closed loop), and no group has one",
            )),
            None => Ok(None),
        };
    }
    check_share_sum(source, &shared)?;
    let rate_per_s = positive(source, "workload.rate_per_s", raw.rate_per_s)?;
    let duration_s = positive(source, "workload.duration_s", raw.duration_s)?;
    let until = time_ms(source, "workload.duration_s", duration_s * 1000.0)?;
    let process = match raw.arrival {
        None | Some(RawProcess::Poisson) => Process::Poisson,
        Some(RawProcess::Uniform) => Process::Uniform,
        Some(RawProcess::Gamma { cv }) => Process::Gamma { cv },
    };
    let shape = rate_shape(source, raw.rate_shape.as_deref())?;
    // The load offered over the window, in seconds at the base rate.
    let load_s = shape
        .as_ref()
        .map_or(duration_s, |s| s.load_ns(until) / 1e9);
    let counted: u64 = groups.iter().filter_map(|g| g.count).sum();
    let expected = rate_per_s * load_s + counted as f64;
    if expected > MAX_REQUESTS as f64 {
        return Err(source.at(
            "workload.rate_per_s",
            format!(
                "{rate_per_s} per s for {duration_s} s (plus {counted} counted) is about {expected:.0} requests: a run may have at most {MAX_REQUESTS}"
            ),
        ));
    }
    Ok(Some(SharedArrivals {
        process,
        rate_per_s,
        load_s,
        until,
        shape,
    }))
}

/// `workload.rate_shape`: pieces `{until_s, scale}` of the rate, in time order.
fn rate_shape(
    source: &Source,
    raw: Option<&[RawRatePiece]>,
) -> Result<Option<RateShape>, ScenarioError> {
    let Some(raw) = raw else { return Ok(None) };
    let mut pieces = Vec::with_capacity(raw.len());
    for (index, piece) in raw.iter().enumerate() {
        let path = format!("workload.rate_shape.{index}.until_s");
        let until_ms = piece.until_s * 1000.0;
        if !(until_ms.is_finite() && until_ms > 0.0) {
            return Err(source.at(
                &path,
                format!("must be a positive number, got {:?}", piece.until_s),
            ));
        }
        pieces.push((time_ms(source, &path, until_ms)?, piece.scale));
    }
    RateShape::new(pieces).map(Some).map_err(|(index, why)| {
        let field = if why.contains("scale") {
            "scale"
        } else {
            "until_s"
        };
        source.at(&format!("workload.rate_shape.{index}.{field}"), why)
    })
}

/// The shares add up to 1 (within [`SHARE_SUM_TOLERANCE`]); the error names the first
/// shared group's `share`.
fn check_share_sum(source: &Source, shared: &[&RawGroup]) -> Result<(), ScenarioError> {
    let sum: f64 = shared.iter().filter_map(|g| g.share).sum();
    if (sum - 1.0).abs() <= SHARE_SUM_TOLERANCE {
        return Ok(());
    }
    let terms: Vec<String> = shared
        .iter()
        .map(|g| format!("{} {}", g.name, g.share.unwrap_or_default()))
        .collect();
    Err(source.at(
        &format!("workload.groups.\"{}\".share", shared[0].name),
        format!(
            "the shares add up to {}, not 1 ({})",
            decimal(sum),
            terms.join(" + ")
        ),
    ))
}

/// `sum` to 9 decimals without trailing zeros, so 0.3 + 0.6 reads 0.9, not
/// 0.8999999999999999.
fn decimal(sum: f64) -> String {
    let text = format!("{sum:.9}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A required, positive and finite number at `path`.
fn positive(source: &Source, path: &str, value: Option<f64>) -> Result<f64, ScenarioError> {
    match value {
        None => Err(source.at(path, "is required by the groups with `share`")),
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(source.at(path, format!("must be a positive number, got {v:?}"))),
    }
}

/// A group's count and arrivals: its own, or its share of the workload's.
fn sizing(
    source: &Source,
    group: &RawGroup,
    shared: Option<&SharedArrivals>,
) -> Result<Sizing, ScenarioError> {
    let path = format!("workload.groups.\"{}\".arrival", group.name);
    match (group.count, group.share, shared) {
        (None, Some(share), Some(s)) => Ok(Sizing {
            count: (s.rate_per_s * share * s.load_s).floor() as u64,
            arrival: Arrival::Timed {
                process: s.process,
                rate_per_s: s.rate_per_s * share,
                until: s.until,
                shape: s.shape.clone(),
            },
        }),
        (count, _, _) => Ok(Sizing {
            count: count.unwrap_or_default(),
            arrival: arrival(source, &path, group.arrival.as_ref())?,
        }),
    }
}

/// `workload.concurrency` (with `duration_s` as the issue bound): the closed loop, if any.
pub(super) fn closed_loop(
    source: &Source,
    raw: &RawWorkload,
) -> Result<Option<ClosedLoop>, ScenarioError> {
    let Some(concurrency) = raw.concurrency else {
        return Ok(None);
    };
    let concurrency = bounds_check::concurrency(concurrency)
        .map_err(|message| source.at("workload.concurrency", message))?;
    let issue_until = match raw.duration_s {
        None => None,
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(source.at(
                "workload.duration_s",
                format!("must be a positive number, got {s:?}"),
            ));
        }
        Some(s) => Some(time_ms(source, "workload.duration_s", s * 1000.0)?),
    };
    Ok(Some(ClosedLoop {
        concurrency,
        issue_until,
    }))
}

/// `workload.warmup_s`: non-negative, within the time bound, and shorter than `duration_s`
/// (a warmup as long as the arrivals would leave nothing to measure).
pub(super) fn warmup(source: &Source, raw: &RawWorkload) -> Result<SimDuration, ScenarioError> {
    let Some(warmup_s) = raw.warmup_s else {
        return Ok(SimDuration::ZERO);
    };
    let warmup = duration_ms(source, "workload.warmup_s", warmup_s * 1000.0)?;
    if let Some(duration_s) = raw.duration_s
        && warmup_s >= duration_s
    {
        return Err(source.at(
            "workload.warmup_s",
            format!(
                "must be shorter than duration_s ({duration_s} s): every request would be left out"
            ),
        ));
    }
    Ok(warmup)
}

fn group_of(
    source: &Source,
    raw: &RawGroup,
    sizing: Sizing,
    profile: &PolicyProfile,
    pools: &[WorkerPool],
) -> Result<RequestGroup, ScenarioError> {
    let path = |field: &str| format!("workload.groups.\"{}\".{field}", raw.name);
    if raw.name.trim().is_empty() {
        return Err(source.at(&path("name"), "must not be empty"));
    }
    if let Some(class) = &raw.class
        && !class_is_known(profile, class)
    {
        return Err(source.at(
            &path("class"),
            format!(
                "unknown class `{class}`: the policy knows {}",
                known_class_names(profile).join(", ")
            ),
        ));
    }
    let pinned_worker = match &raw.pinned_worker {
        None => None,
        Some(pin) => Some(pinned_rank(source, &path("pinned_worker"), pin, pools)?),
    };
    Ok(RequestGroup {
        name: raw.name.clone(),
        class: raw.class.clone(),
        count: sizing.count,
        input_tokens: lengths(source, &path("input_tokens"), &raw.input_tokens)?,
        output_tokens: lengths(source, &path("output_tokens"), &raw.output_tokens)?,
        arrival: sizing.arrival,
        prefix: raw.prefix.as_ref().map(|p| SharedPrefix {
            tokens: p.tokens,
            groups: p.groups,
        }),
        priority: raw.priority,
        strict_priority: raw.strict_priority,
        pinned_worker,
        sessions: match &raw.sessions {
            None => None,
            Some(sessions) => Some(session_shape(source, &path("sessions"), sessions)?),
        },
    })
}

/// A group's `sessions:`; a distribution's clamps default to what each field may be.
fn session_shape(
    source: &Source,
    path: &str,
    raw: &RawSessions,
) -> Result<SessionShape, ScenarioError> {
    let within = |field: &str, raw: &RawLength, bounds: LengthBounds| {
        lengths_within(
            source,
            &format!("{path}.{field}"),
            raw,
            bounds.floor,
            bounds.ceiling,
        )
    };
    Ok(SessionShape {
        turns: within("turns", &raw.turns, SESSION_TURNS)?,
        think_time_ms: match &raw.think_time_ms {
            Some(think) => within("think_time_ms", think, THINK_TIME_MS)?,
            None => Lengths::fixed(0),
        },
        new_input_tokens: lengths(
            source,
            &format!("{path}.new_input_tokens"),
            &raw.new_input_tokens,
        )?,
    })
}

/// A group's pinned rank: a worker of some pool (ids go pool by pool) and one of its ranks.
fn pinned_rank(
    source: &Source,
    path: &str,
    pin: &RawPin,
    pools: &[WorkerPool],
) -> Result<WorkerWithDpRank, ScenarioError> {
    let mut first_worker = 0u64;
    for pool in pools {
        let next = first_worker + u64::from(pool.count);
        if pin.worker_id < next {
            if pin.dp_rank >= pool.engine.common.dp_size {
                let whose = match pools.len() {
                    1 => "workers have".to_string(),
                    _ => format!("workers of pool `{}` have", pool.name),
                };
                return Err(source.at(
                    &format!("{path}.dp_rank"),
                    format!(
                        "{whose} only {} dp ranks (from 0)",
                        pool.engine.common.dp_size
                    ),
                ));
            }
            return Ok(WorkerWithDpRank {
                worker_id: pin.worker_id,
                dp_rank: pin.dp_rank,
            });
        }
        first_worker = next;
    }
    Err(source.at(
        &format!("{path}.worker_id"),
        format!(
            "unknown worker {}: the run has {}",
            pin.worker_id,
            worker_ids(0, first_worker)
        ),
    ))
}

/// A group may name a policy family or an explicit class (what Dynamo resolves directly);
/// anything else would silently fall back to the default family, so it is refused.
fn class_is_known(profile: &PolicyProfile, class: &str) -> bool {
    known_class_names(profile).iter().any(|name| name == class)
}

fn known_class_names(profile: &PolicyProfile) -> Vec<String> {
    if profile.is_synthetic() {
        return vec!["default".to_string()];
    }
    let explicit = profile
        .classes()
        .iter()
        .filter(|c| c.policy_family.is_none())
        .map(|c| c.name.clone());
    profile.families().iter().cloned().chain(explicit).collect()
}

fn lengths(source: &Source, path: &str, raw: &RawLength) -> Result<Lengths, ScenarioError> {
    lengths_within(source, path, raw, 1, DEFAULT_MAX_TOKENS)
}

/// A length whose distribution is clamped to `[min, max]` unless it says otherwise.
fn lengths_within(
    source: &Source,
    path: &str,
    raw: &RawLength,
    min: u64,
    max: u64,
) -> Result<Lengths, ScenarioError> {
    let dist = match raw {
        RawLength::Fixed(tokens) => return Ok(Lengths::fixed(*tokens)),
        RawLength::Dist(dist) => dist,
    };
    let need = |value: Option<f64>, field: &str| {
        value.ok_or_else(|| source.at(path, format!("`{field}` is required for this `dist`")))
    };
    let RawDist { mean, std_dev, .. } = dist.clone();
    let kind = match dist.dist {
        RawDistKind::Uniform => {
            if dist.min.is_none() || dist.max.is_none() {
                return Err(source.at(path, "`dist: uniform` needs `min` and `max`"));
            }
            LengthDist::Uniform
        }
        RawDistKind::Normal => LengthDist::Normal {
            mean: need(mean, "mean")?,
            std_dev: need(std_dev, "std_dev")?,
        },
        RawDistKind::Lognormal => LengthDist::LogNormal {
            mean: need(mean, "mean")?,
            std_dev: need(std_dev, "std_dev")?,
        },
        RawDistKind::Exponential => LengthDist::Exponential {
            mean: need(mean, "mean")?,
        },
    };
    Ok(Lengths {
        dist: kind,
        min: dist.min.unwrap_or(min),
        max: dist.max.unwrap_or(max),
    })
}

fn arrival(
    source: &Source,
    path: &str,
    raw: Option<&RawArrival>,
) -> Result<Arrival, ScenarioError> {
    Ok(match raw {
        None | Some(RawArrival::Burst) => Arrival::Burst,
        Some(RawArrival::Poisson {
            rate_per_s,
            start_ms,
        }) => Arrival::Poisson {
            rate_per_s: *rate_per_s,
            start: time_ms(source, &format!("{path}.poisson.start_ms"), *start_ms)?,
        },
        Some(RawArrival::Interval { every_ms, start_ms }) => Arrival::Interval {
            every: duration_ms(source, &format!("{path}.interval.every_ms"), *every_ms)?,
            start: time_ms(source, &format!("{path}.interval.start_ms"), *start_ms)?,
        },
        Some(RawArrival::AtMs(times)) => Arrival::At(
            times
                .iter()
                .enumerate()
                .map(|(i, ms)| time_ms(source, &format!("{path}.at_ms[{i}]"), *ms))
                .collect::<Result<_, _>>()?,
        ),
    })
}
