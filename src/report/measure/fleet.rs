//! What the fleet cost and how it changed: GPU-hours, peak and mean workers per role and in
//! all, and the scaling policy's events. A worker is billed from when it was asked for until
//! it left or the run ended (its start-up and its drain count, as 1.6.1 bills them).

use crate::mocker::WorkerRole;
use crate::sim::{ScalingEvent, SimResult, WorkerLife};
use crate::time::SimTime;

/// The fleet's figures for one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetMetrics {
    /// Every worker together.
    pub all: FleetFigures,
    /// Per role that had workers, in the order aggregated, prefill, decode.
    pub roles: Vec<(WorkerRole, FleetFigures)>,
    /// The scaling policy's events (`None`: the run had no policy).
    pub events: Option<Vec<ScalingEvent>>,
}

/// What a set of workers cost over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FleetFigures {
    /// GPUs times hours billed.
    pub gpu_hours: f64,
    /// The most workers billed at once.
    pub peak_workers: u64,
    /// Workers billed, on average over the run (its makespan; at its start for a run of no
    /// length).
    pub mean_workers: f64,
}

/// The fleet figures of `result`.
pub fn fleet_metrics(result: &SimResult) -> FleetMetrics {
    let end = result.end_time;
    let lives = &result.worker_lives;
    let roles = [
        WorkerRole::Aggregated,
        WorkerRole::Prefill,
        WorkerRole::Decode,
    ];
    let roles = roles
        .into_iter()
        .filter(|role| lives.iter().any(|life| life.role == *role))
        .map(|role| (role, figures(lives.iter().filter(|l| l.role == role), end)))
        .collect();
    FleetMetrics {
        all: figures(lives.iter(), end),
        roles,
        events: result.scaling_events.clone(),
    }
}

/// The figures of `lives` over a run that ended at `end`.
fn figures<'a>(lives: impl Iterator<Item = &'a WorkerLife> + Clone, end: SimTime) -> FleetFigures {
    let (mut gpu_ns, mut worker_ns) = (0u128, 0u128);
    for life in lives.clone() {
        let from = life.asked.min(end);
        let until = life.gone.unwrap_or(end).min(end).max(from);
        let billed = u128::from(until.saturating_since(from).as_ns());
        gpu_ns += billed * u128::from(life.gpus);
        worker_ns += billed;
    }
    // The most billed at once: a worker still there at the end, or there for a while.
    let billed = step_curve(lives.map(|l| (l.asked, l.gone)), end);
    let peak = billed.iter().map(|p| p.1).max().unwrap_or(0);
    let mean_workers = match end.as_ns() {
        0 => peak as f64,
        ns => worker_ns as f64 / ns as f64,
    };
    FleetFigures {
        gpu_hours: gpu_ns as f64 / 3.6e12,
        peak_workers: peak,
        mean_workers,
    }
}

/// A role's workers over a run, as step curves: `(time, count from then on)` at each change.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleCurve {
    pub role: WorkerRole,
    /// Workers taking requests: ready and not yet draining.
    pub serving: Vec<(SimTime, u64)>,
    /// Workers billed: asked for and not yet gone (starting, serving and draining).
    pub billed: Vec<(SimTime, u64)>,
}

/// Each role's workers over a run that ended at `end`, in the order aggregated, prefill,
/// decode (roles with no worker left out).
pub fn role_curves(lives: &[WorkerLife], end: SimTime) -> Vec<RoleCurve> {
    let roles = [
        WorkerRole::Aggregated,
        WorkerRole::Prefill,
        WorkerRole::Decode,
    ];
    roles
        .into_iter()
        .filter(|role| lives.iter().any(|life| life.role == *role))
        .map(|role| {
            let of_role = || lives.iter().filter(move |l| l.role == role);
            let serving = of_role().filter_map(|l| Some((l.ready?, l.draining.or(l.gone))));
            let billed = of_role().map(|l| (l.asked, l.gone));
            RoleCurve {
                role,
                serving: step_curve(serving, end),
                billed: step_curve(billed, end),
            }
        })
        .collect()
}

/// How many `(from, until)` spans are open, at each instant that changes it within
/// `[0, end]`; a span of no length never counts.
fn step_curve(
    spans: impl Iterator<Item = (SimTime, Option<SimTime>)>,
    end: SimTime,
) -> Vec<(SimTime, u64)> {
    let mut edges: Vec<(SimTime, i64)> = Vec::new();
    for (from, until) in spans {
        let until = until.unwrap_or(SimTime::MAX);
        if from < until && from <= end {
            edges.push((from, 1));
            if until <= end {
                edges.push((until, -1));
            }
        }
    }
    edges.sort_unstable();
    let mut curve: Vec<(SimTime, u64)> = Vec::new();
    let mut open = 0i64;
    for (at, step) in edges {
        open += step;
        let count = open.max(0) as u64;
        match curve.last_mut() {
            Some(last) if last.0 == at => last.1 = count,
            _ => curve.push((at, count)),
        }
    }
    curve
}

#[cfg(test)]
mod tests {
    use super::{FleetFigures, RoleCurve, figures, role_curves};
    use crate::mocker::WorkerRole;
    use crate::sim::WorkerLife;
    use crate::time::SimTime;

    fn at(s: u64) -> SimTime {
        SimTime::from_ns(s * 1_000_000_000)
    }

    fn life(gpus: u64, asked: u64, gone: Option<u64>) -> WorkerLife {
        WorkerLife {
            pool: 0,
            role: WorkerRole::Aggregated,
            gpus,
            asked: at(asked),
            ready: Some(at(asked)),
            draining: None,
            gone: gone.map(at),
        }
    }

    #[test]
    fn workers_are_billed_from_asked_until_gone_or_the_end() {
        // One worker all run (3,600 s, 2 GPUs), one asked at 1,800 s, one gone at 900 s.
        let lives = [
            life(2, 0, None),
            life(2, 1_800, None),
            life(2, 0, Some(900)),
        ];
        let f = figures(lives.iter(), at(3_600));
        assert_eq!(f.gpu_hours, 2.0 + 1.0 + 0.5);
        assert_eq!(f.peak_workers, 2);
        assert_eq!(f.mean_workers, 1.75);
    }

    #[test]
    fn a_worker_leaving_as_another_is_asked_for_does_not_raise_the_peak() {
        let lives = [life(1, 0, Some(10)), life(1, 10, None)];
        assert_eq!(figures(lives.iter(), at(20)).peak_workers, 1);
    }

    #[test]
    fn a_start_cancelled_at_once_costs_nothing_and_a_run_of_no_length_counts_its_workers() {
        let lives = [life(1, 0, None), life(1, 5, Some(5))];
        let f = figures(lives.iter(), at(10));
        assert_eq!((f.peak_workers, f.gpu_hours), (1, 10.0 / 3_600.0));
        let f = figures([life(4, 0, None)].iter(), SimTime::ZERO);
        let expected = FleetFigures {
            gpu_hours: 0.0,
            peak_workers: 1,
            mean_workers: 1.0,
        };
        assert_eq!(f, expected);
    }

    #[test]
    fn role_curves_count_serving_from_ready_to_draining_and_billed_from_asked_to_gone() {
        let mut late = life(1, 10, Some(40));
        late.ready = Some(at(15));
        late.draining = Some(at(30));
        let mut cancelled = life(1, 20, Some(20));
        cancelled.ready = None;
        let mut prefill = life(1, 0, None);
        prefill.role = WorkerRole::Prefill;
        let curves = role_curves(&[life(1, 0, None), late, cancelled, prefill], at(50));
        let aggregated = RoleCurve {
            role: WorkerRole::Aggregated,
            serving: vec![(at(0), 1), (at(15), 2), (at(30), 1)],
            billed: vec![(at(0), 1), (at(10), 2), (at(40), 1)],
        };
        assert_eq!(curves[0], aggregated);
        assert_eq!(curves[1].role, WorkerRole::Prefill);
        assert_eq!(curves[1].serving, vec![(at(0), 1)]);
        assert_eq!(curves.len(), 2, "no decode worker, no decode curve");
    }

    #[test]
    fn a_worker_leaving_as_another_joins_is_one_step_that_keeps_the_count() {
        let curves = role_curves(&[life(1, 0, Some(10)), life(1, 10, None)], at(20));
        assert_eq!(curves[0].billed, vec![(at(0), 1), (at(10), 1)]);
    }
}
