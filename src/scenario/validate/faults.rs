//! `faults:` validated: each entry dispatched once to its kind's check (worker down,
//! cancel, worker up, worker drain), then the bounds over all of them.

use super::{Source, time_ms, worker_ids};
use crate::bounds::MAX_RANKS;
use crate::engine::{DEFAULT_MAX_TIME_NS, Limits};
use crate::mocker::WorkerRole;
use crate::report::verdict::expect::number;
use crate::scenario::ScenarioError;
use crate::scenario::raw::{
    RawCancel, RawFault, RawFaultKind, RawGroup, RawLimits, RawScenario, RawWorkerDown,
    RawWorkerDrain, RawWorkerUp,
};
use crate::sim::{Fault, WorkerPool, models_cancels};
use crate::time::{NS_PER_MS, NS_PER_SEC, SimDuration, SimTime};

/// `faults:` resolved: worker ids and pools checked against the pools, a cancel's `group`
/// to the class its requests ask for (a synthetic group's `class`, which no other group may
/// share; with a trace, `group` names a policy class), times within the time bound and the
/// run's `limits.max_time_ms` (a fault past it could never act), and no two down windows of
/// one worker overlapping.
pub(super) fn faults(
    source: &Source,
    raw: &RawScenario,
    pools: &[WorkerPool],
    limits: &Limits,
) -> Result<Vec<Fault>, ScenarioError> {
    let mut out = Vec::with_capacity(raw.faults.len());
    let mut windows: Vec<DownWindow> = Vec::new();
    for (index, f) in raw.faults.iter().enumerate() {
        let entry = Entry {
            source,
            raw,
            limits,
            index,
        };
        let fault = match f.kind() {
            None => {
                let message = format!("needs exactly one of {}", RawFault::KEYS.join(", "));
                return Err(source.at(&format!("faults[{index}]"), message));
            }
            Some(RawFaultKind::WorkerDown(d)) => worker_down(&entry, d, pools, &mut windows)?,
            Some(RawFaultKind::Cancel(c)) => cancel(&entry, c, pools)?,
            Some(RawFaultKind::WorkerUp(u)) => worker_up(&entry, u, pools)?,
            Some(RawFaultKind::WorkerDrain(d)) => worker_drain(&entry, d, pools)?,
        };
        out.push(fault);
    }
    check_joined_ranks(source, pools, &out)?;
    check_drained_once_and_never_down(source, &out)?;
    Ok(out)
}

/// The `faults:` entry being checked, and how to locate its errors.
struct Entry<'a> {
    source: &'a Source,
    raw: &'a RawScenario,
    limits: &'a Limits,
    index: usize,
}

impl Entry<'_> {
    /// The path of `field` inside this entry, e.g. `faults[2].worker_down.at_ms`.
    fn path(&self, field: &str) -> String {
        format!("faults[{}].{field}", self.index)
    }

    /// An error at `field` of this entry.
    fn at(&self, field: &str, message: impl Into<String>) -> ScenarioError {
        self.source.at(&self.path(field), message)
    }

    /// The time `ms` at `field`, checked as every fault time is.
    fn time_ms(&self, field: &str, ms: f64) -> Result<SimTime, ScenarioError> {
        let path = self.path(field);
        fault_time_ms(self.source, &self.raw.limits, self.limits, &path, ms)
    }
}

/// A worker's down window `[start, until)` (`None`: for the rest of the run), and the index
/// of the entry that set it.
struct DownWindow {
    worker: u64,
    start: SimTime,
    until: Option<SimTime>,
    index: usize,
}

/// `worker_down`: a known worker, `until_ms` after `at_ms`, and no overlap with another
/// window of the same worker (kept in `windows`).
fn worker_down(
    entry: &Entry,
    d: &RawWorkerDown,
    pools: &[WorkerPool],
    windows: &mut Vec<DownWindow>,
) -> Result<Fault, ScenarioError> {
    let named = NamedWorker {
        key: "worker_down",
        role: &d.role,
        worker: d.worker,
    };
    let worker = worker_id(entry, &named, pools)?;
    let start = entry.time_ms("worker_down.at_ms", d.at_ms)?;
    let until = match d.until_ms {
        None => None,
        Some(ms) => {
            let until = entry.time_ms("worker_down.until_ms", ms)?;
            if until <= start {
                let message = format!("must be after at_ms ({})", d.at_ms);
                return Err(entry.at("worker_down.until_ms", message));
            }
            Some(until)
        }
    };
    let overlaps = |w: &&DownWindow| {
        w.worker == worker
            && until.is_none_or(|until| w.start < until)
            && w.until.is_none_or(|u| start < u)
    };
    if let Some(other) = windows.iter().find(overlaps) {
        let message = format!(
            "{} is already down then (faults[{}])",
            named.name(),
            other.index
        );
        return Err(entry.at("worker_down.at_ms", message));
    }
    windows.push(DownWindow {
        worker,
        start,
        until,
        index: entry.index,
    });
    Ok(Fault::WorkerDown {
        worker,
        at: start,
        until,
    })
}

/// A worker as a fault entry names it: `worker`, numbered within `role` in disaggregated
/// serving, under the entry's `key` (`worker_down` or `worker_drain`).
struct NamedWorker<'a> {
    key: &'static str,
    role: &'a Option<String>,
    worker: u64,
}

impl NamedWorker<'_> {
    /// How an error names it: `worker 2`, or `decode worker 2`.
    fn name(&self) -> String {
        match self.role {
            Some(role) => format!("{role} worker {}", self.worker),
            None => format!("worker {}", self.worker),
        }
    }
}

/// The run-wide id of the worker a fault names: in aggregated serving its `worker` (no
/// `role`); in disaggregated serving the `worker`-th of its `role`'s workers, in pool order
/// (prefill pools come first).
fn worker_id(entry: &Entry, d: &NamedWorker, pools: &[WorkerPool]) -> Result<u64, ScenarioError> {
    let key = d.key;
    let disaggregated = pools
        .iter()
        .any(|p| p.engine.common.role != WorkerRole::Aggregated);
    let role = match (d.role, disaggregated) {
        (None, false) => WorkerRole::Aggregated,
        (Some(_), false) => {
            let message = "only in disaggregated serving: these workers are aggregated";
            return Err(entry.at(&format!("{key}.role"), message));
        }
        (None, true) => {
            let message = "name the role, prefill or decode: the run serves disaggregated";
            return Err(entry.at(key, message));
        }
        (Some(name), true) => match WorkerRole::from_worker_type(name) {
            Some(role) if role != WorkerRole::Aggregated => role,
            _ => {
                let message = format!("unknown role `{name}`: prefill or decode");
                return Err(entry.at(&format!("{key}.role"), message));
            }
        },
    };
    // A role's pools are contiguous in id order.
    let (mut first, mut workers, mut next) = (None, 0u64, 0u64);
    for pool in pools {
        if pool.engine.common.role == role {
            first.get_or_insert(next);
            workers += u64::from(pool.count);
        }
        next += u64::from(pool.count);
    }
    if d.worker >= workers {
        let whose = match d.role {
            Some(role) => format!("the {role} role has"),
            None => "the run has".to_string(),
        };
        let message = format!("unknown {}: {whose} {}", d.name(), worker_ids(0, workers));
        return Err(entry.at(&format!("{key}.worker"), message));
    }
    Ok(first.unwrap_or(0) + d.worker)
}

/// `worker_drain`: a known worker (one the run starts with), a time in range.
fn worker_drain(
    entry: &Entry,
    d: &RawWorkerDrain,
    pools: &[WorkerPool],
) -> Result<Fault, ScenarioError> {
    let named = NamedWorker {
        key: "worker_drain",
        role: &d.role,
        worker: d.worker,
    };
    let worker = worker_id(entry, &named, pools)?;
    let at = entry.time_ms("worker_drain.at_ms", d.at_ms)?;
    Ok(Fault::WorkerDrain { worker, at })
}

/// A worker drains at most once, and never also goes down: a drained worker is gone, and one
/// that fails while draining would be two stories about the same requests.
fn check_drained_once_and_never_down(
    source: &Source,
    faults: &[Fault],
) -> Result<(), ScenarioError> {
    for (index, fault) in faults.iter().enumerate() {
        let Fault::WorkerDrain { worker, .. } = *fault else {
            continue;
        };
        let clash = faults.iter().enumerate().find(|(other, f)| match **f {
            Fault::WorkerDrain { worker: w, .. } => w == worker && *other < index,
            Fault::WorkerDown { worker: w, .. } => w == worker,
            _ => false,
        });
        if let Some((other, f)) = clash {
            let what = match f {
                Fault::WorkerDown { .. } => "goes down",
                _ => "already drains",
            };
            let message = format!(
                "this worker {what} in faults[{other}]: a worker drains once, and a draining worker does not also fail"
            );
            return Err(source.at(&format!("faults[{index}].worker_drain.worker"), message));
        }
    }
    Ok(())
}

/// Why a `cancel` fault is refused in disaggregated serving (a rule across `faults:` and
/// `workers:`, [`models_cancels`]).
pub(super) const CANCEL_IN_DISAGGREGATED: &str = "cancelling requests in disaggregated serving is not modelled yet: a request cancelled between its prefill and decode workers has two holds to drop";

/// `cancel`: in a run that models cancels (asked first, so that it stays the entry's first
/// error), a group that resolves to a class, a fraction in [0, 1], a delay in range.
fn cancel(entry: &Entry, c: &RawCancel, pools: &[WorkerPool]) -> Result<Fault, ScenarioError> {
    if !models_cancels(pools) {
        return Err(entry.at("cancel", CANCEL_IN_DISAGGREGATED));
    }
    let group_path = entry.path("cancel.group");
    let class = cancel_class(entry.source, entry.raw, &group_path, &c.group)?;
    if !(0.0..=1.0).contains(&c.fraction) {
        return Err(entry.at("cancel.fraction", "must be in [0, 1]"));
    }
    let after = entry.time_ms("cancel.after_ms", c.after_ms)?;
    Ok(Fault::Cancel {
        class,
        fraction: c.fraction,
        after: SimDuration::from_ns(after.as_ns()),
    })
}

/// `worker_up`: a pool by name, a time in range.
fn worker_up(entry: &Entry, u: &RawWorkerUp, pools: &[WorkerPool]) -> Result<Fault, ScenarioError> {
    let Some(pool) = pools.iter().position(|p| p.name == u.pool) else {
        let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
        let message = format!(
            "unknown pool `{}`: the pools are {}",
            u.pool,
            names.join(", ")
        );
        return Err(entry.at("worker_up.pool", message));
    };
    let at = entry.time_ms("worker_up.at_ms", u.at_ms)?;
    Ok(Fault::WorkerUp { pool, at })
}

/// Workers joining must keep the run within the rank bound, each join counted at the widest
/// pool's `dp_size`.
fn check_joined_ranks(
    source: &Source,
    pools: &[WorkerPool],
    faults: &[Fault],
) -> Result<(), ScenarioError> {
    let joins = faults
        .iter()
        .filter(|f| matches!(f, Fault::WorkerUp { .. }))
        .count() as u64;
    let ranks: u64 = pools
        .iter()
        .map(|p| u64::from(p.count) * u64::from(p.engine.common.dp_size.max(1)))
        .sum::<u64>()
        + joins
            * pools
                .iter()
                .map(|p| u64::from(p.engine.common.dp_size.max(1)))
                .max()
                .unwrap_or(1);
    if ranks > MAX_RANKS {
        return Err(source.at(
            "faults",
            format!("workers joining would exceed {MAX_RANKS} ranks"),
        ));
    }
    Ok(())
}

/// A fault's time at `path`: within the time bound, and at most the run's time limit
/// (`limits.max_time_ms`, after overrides), past which no event runs. The error names the limit
/// and where it comes from.
fn fault_time_ms(
    source: &Source,
    raw: &RawLimits,
    limits: &Limits,
    path: &str,
    ms: f64,
) -> Result<SimTime, ScenarioError> {
    let time = time_ms(source, path, ms)?;
    if time <= limits.max_time {
        return Ok(time);
    }
    let limit_ms = number(limits.max_time.as_ns() as f64 / NS_PER_MS as f64);
    let whose = match raw.max_time_ms {
        Some(_) => "limits.max_time_ms".to_string(),
        None => format!(
            "the default limits.max_time_ms, {} days",
            DEFAULT_MAX_TIME_NS / (24 * 3600 * NS_PER_SEC)
        ),
    };
    Err(source.at(
        path,
        format!(
            "{} ms is past the run's time limit, {limit_ms} ms ({whose}): no event runs after it, so this fault could never act",
            number(ms)
        ),
    ))
}

/// The class a cancel's `group` acts on: a synthetic group's `class` (unshared), or with a
/// trace, a class name itself.
fn cancel_class(
    source: &Source,
    raw: &RawScenario,
    path: &str,
    group: &str,
) -> Result<String, ScenarioError> {
    let groups: &[RawGroup] = raw.workload.groups.as_deref().unwrap_or(&[]);
    if raw.workload.trace.is_some() {
        return Ok(group.to_string());
    }
    let Some(g) = groups.iter().find(|g| g.name == group) else {
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        return Err(source.at(
            path,
            format!(
                "unknown group `{group}`: the groups are {}",
                names.join(", ")
            ),
        ));
    };
    let Some(class) = &g.class else {
        return Err(source.at(path, format!("group `{group}` has no class to cancel by")));
    };
    if let Some(other) = groups
        .iter()
        .find(|o| o.name != group && o.class.as_ref() == Some(class))
    {
        return Err(source.at(
            path,
            format!(
                "groups `{group}` and `{}` share class `{class}`: a cancel acts on a class",
                other.name
            ),
        ));
    }
    Ok(class.clone())
}

#[cfg(test)]
mod tests {
    use crate::bounds::MAX_RANKS;
    use crate::scenario::Scenario;
    use std::path::Path;

    /// The error a two-worker scenario with these `faults:` entries is.
    fn error(faults: &str) -> String {
        let text = format!(
            "name: f\nworkers: {{count: 2}}\nworkload:\n  groups:\n    - {{name: g, count: 4, input_tokens: 64, output_tokens: 2}}\nfaults:\n{faults}"
        );
        let e = Scenario::from_text(Path::new("f.yaml"), &text, &[]).unwrap_err();
        e.to_string()
    }

    #[test]
    fn a_fault_entry_with_no_kind_or_two_is_an_error_at_the_entry() {
        let both = "{worker_down: {worker: 0, at_ms: 1}, worker_up: {pool: default, at_ms: 2}}";
        for entry in ["{}", both] {
            assert_eq!(
                error(&format!("  - {entry}\n")),
                "f.yaml:7: faults.0: needs exactly one of worker_down, cancel, worker_up, worker_drain",
                "{entry}"
            );
        }
    }

    #[test]
    fn a_role_on_an_aggregated_worker_down_is_an_error_at_the_role() {
        assert_eq!(
            error("  - {worker_down: {role: decode, worker: 0, at_ms: 1}}\n"),
            "f.yaml:7: faults.0.worker_down.role: only in disaggregated serving: these workers are aggregated"
        );
        assert_eq!(
            error("  - {worker_down: {worker: 2, at_ms: 1}}\n"),
            "f.yaml:7: faults.0.worker_down.worker: unknown worker 2: the run has workers 0 to 1"
        );
    }

    #[test]
    fn workers_joining_past_the_rank_bound_are_an_error_at_faults() {
        let join = "  - {worker_up: {pool: default, at_ms: 1}}\n";
        let message = format!("faults: workers joining would exceed {MAX_RANKS} ranks");
        let at_bound = join.repeat(MAX_RANKS as usize - 2);
        let text = format!(
            "name: f\nworkers: {{count: 2}}\nworkload:\n  groups:\n    - {{name: g, count: 4, input_tokens: 64, output_tokens: 2}}\nfaults:\n{at_bound}"
        );
        assert!(Scenario::from_text(Path::new("f.yaml"), &text, &[]).is_ok());
        let past = error(&join.repeat(MAX_RANKS as usize - 1));
        assert!(past.ends_with(&message), "{past}");
    }
}
