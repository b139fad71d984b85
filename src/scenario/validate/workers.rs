//! `workers:` validated into worker pools: the plain form (`count`, `dp_size`, `startup_time`,
//! `tensor_parallel_size`, `engine`: one
//! pool named `default`), named `pools`, or disaggregated serving's `prefill` and `decode`
//! roles, each in either form. Errors name the field (`workers.prefill.count`,
//! `workers.pools.h100.engine.block_size`).

use super::super::raw::{RawPool, RawRole, RawWorkers};
use super::{Launch, Source, bounds_check, engine_args};
use crate::bounds::MAX_RANKS;
use crate::mocker::{EngineArgs, EngineSection, WorkerRole};
use crate::scenario::ScenarioError;
use crate::sim::{DEFAULT_POOL, WorkerPool};

/// One role's workers as written: at `at`, in the plain form or as `pools`.
struct Form<'a> {
    at: &'a str,
    role: WorkerRole,
    /// The name of the plain form's one pool.
    plain_name: &'a str,
    count: Option<u64>,
    dp_size: Option<u64>,
    startup_time: Option<f64>,
    tensor_parallel_size: Option<u64>,
    engine: Option<&'a EngineSection>,
    pools: Option<&'a [RawPool]>,
}

impl<'a> Form<'a> {
    fn of_role(at: &'a str, role: WorkerRole, raw: &'a RawRole) -> Form<'a> {
        Form {
            at,
            role,
            plain_name: role.label(),
            count: raw.count,
            dp_size: raw.dp_size,
            startup_time: raw.startup_time,
            tensor_parallel_size: raw.tensor_parallel_size,
            engine: raw.engine.as_ref(),
            pools: raw.pools.as_deref(),
        }
    }
}

/// The worker pools of `workers:` (see the module docs).
pub(super) fn worker_pools(
    source: &Source,
    raw: &RawWorkers,
) -> Result<Vec<WorkerPool>, ScenarioError> {
    let aggregated = Form {
        at: "workers",
        role: WorkerRole::Aggregated,
        plain_name: DEFAULT_POOL,
        count: raw.count,
        dp_size: raw.dp_size,
        startup_time: raw.startup_time,
        tensor_parallel_size: raw.tensor_parallel_size,
        engine: raw.engine.as_ref(),
        pools: raw.pools.as_deref(),
    };
    if raw.prefill.is_none() && raw.decode.is_none() {
        let mut pools = Vec::new();
        pools_of(source, &aggregated, &mut pools)?;
        return Ok(pools);
    }
    let plain = [
        ("count", raw.count.is_some()),
        ("dp_size", raw.dp_size.is_some()),
        ("startup_time", raw.startup_time.is_some()),
        ("tensor_parallel_size", raw.tensor_parallel_size.is_some()),
        ("engine", raw.engine.is_some()),
        ("pools", raw.pools.is_some()),
    ];
    if let Some((field, _)) = plain.iter().find(|(_, given)| *given) {
        return Err(source.at(
            &format!("workers.{field}"),
            "give either `prefill` and `decode` (disaggregated serving) or aggregated workers, not both: each role has its own count and engine",
        ));
    }
    // One role alone is refused by `resolve`, which holds the rules across pools.
    let mut pools = Vec::new();
    let roles = [
        ("workers.prefill", WorkerRole::Prefill, &raw.prefill),
        ("workers.decode", WorkerRole::Decode, &raw.decode),
    ];
    for (at, role, form) in roles {
        if let Some(form) = form {
            pools_of(source, &Form::of_role(at, role, form), &mut pools)?;
        }
    }
    check_transfers(source, &pools, raw)?;
    Ok(pools)
}

/// Disaggregated serving with the role at `at` alone: `missing` is the other.
pub(super) fn needs_both(source: &Source, at: &str, missing: &str) -> ScenarioError {
    source.at(
        at,
        format!("disaggregated serving needs `workers.{missing}` too: prefill workers hand every request to decode workers"),
    )
}

/// Appends the pools of `form` to `pools` (the pools before it, whose names and ranks count).
fn pools_of(
    source: &Source,
    form: &Form,
    pools: &mut Vec<WorkerPool>,
) -> Result<(), ScenarioError> {
    let at = form.at;
    let Some(raw_pools) = form.pools else {
        let engine = form.engine.cloned().unwrap_or_default();
        let launch = Launch {
            dp_size: form.dp_size,
            startup_time: form.startup_time,
            tensor_parallel_size: form.tensor_parallel_size,
        };
        let engine = role_engine(source, at, form.role, engine, launch)?;
        let count = form.count.unwrap_or(1);
        let count = bounds_check::rank_count(count)
            .map_err(|message| source.at(&format!("{at}.count"), message))?;
        bounds_check::worker_ranks(count, engine.common.dp_size)
            .map_err(|message| source.at(&format!("{at}.dp_size"), message))?;
        if let Some(index) = pools.iter().position(|p| p.name == form.plain_name) {
            return Err(plain_name_taken(source, form, pools, index));
        }
        add_pool(
            source,
            at,
            pools,
            form.plain_name.to_string(),
            count,
            engine,
        )?;
        return Ok(());
    };
    let plain = [
        ("count", form.count.is_some()),
        ("dp_size", form.dp_size.is_some()),
        ("startup_time", form.startup_time.is_some()),
        ("tensor_parallel_size", form.tensor_parallel_size.is_some()),
        ("engine", form.engine.is_some()),
    ];
    if let Some((field, _)) = plain.iter().find(|(_, given)| *given) {
        return Err(source.at(
            &format!("{at}.{field}"),
            "give either `pools` or `count`, `dp_size` and `engine` (one unnamed pool), not both: each pool has its own",
        ));
    }
    if raw_pools.is_empty() {
        return Err(source.at(&format!("{at}.pools"), "needs at least one pool"));
    }
    for (index, raw_pool) in raw_pools.iter().enumerate() {
        let at = format!("{at}.pools[{index}]");
        let name = pool_name(source, &at, raw_pool.name.as_deref(), pools)?;
        let Some(count) = raw_pool.count else {
            return Err(source.at(&at, "a pool needs `count`: how many workers it has"));
        };
        let count = bounds_check::rank_count(count)
            .map_err(|message| source.at(&format!("{at}.count"), message))?;
        let engine = role_engine(
            source,
            &at,
            form.role,
            raw_pool.engine.clone(),
            Launch {
                dp_size: raw_pool.dp_size,
                startup_time: raw_pool.startup_time,
                tensor_parallel_size: raw_pool.tensor_parallel_size,
            },
        )?;
        add_pool(source, &at, pools, name, count, engine)?;
    }
    Ok(())
}

/// A role in the plain form names its one pool after the role, so an earlier role's pool of
/// that name (a prefill pool named `decode`) would make two pools of one name: repeated
/// `classes.csv` columns and an ambiguous `pool:` in faults. The error names that pool.
fn plain_name_taken(
    source: &Source,
    form: &Form,
    pools: &[WorkerPool],
    index: usize,
) -> ScenarioError {
    let taken = &pools[index];
    let role = taken.engine.common.role;
    let first = pools
        .iter()
        .position(|p| p.engine.common.role == role)
        .unwrap_or(0);
    let at = format!("workers.{}.pools[{}].name", role.label(), index - first);
    let mut error = source.at(
        &at,
        format!(
            "pool `{}` has the name of `{}`'s one pool: pool names are unique across roles",
            taken.name, form.at
        ),
    );
    // By index, as `pool_name` names it: the name is what is wrong.
    error.field_path = at;
    error
}

/// Adds a pool of `count` workers of `engine` (at `at`) after `pools`, within the bound on
/// ranks over every pool (the pools' block sizes agree or not: `resolve` decides).
fn add_pool(
    source: &Source,
    at: &str,
    pools: &mut Vec<WorkerPool>,
    name: String,
    count: u32,
    engine: EngineArgs,
) -> Result<(), ScenarioError> {
    let earlier: u64 = pools
        .iter()
        .map(|p| u64::from(p.count) * u64::from(p.engine.common.dp_size))
        .sum();
    let ranks = earlier + u64::from(count) * u64::from(engine.common.dp_size);
    if ranks > MAX_RANKS {
        return Err(source.at(
            &format!("{at}.count"),
            format!(
                "the pools through this one have {ranks} worker ranks (count x dp_size summed): a run may have at most {MAX_RANKS}"
            ),
        ));
    }
    pools.push(WorkerPool {
        name,
        count,
        engine,
    });
    Ok(())
}

/// The engine at `at` for workers of `role`: its `worker_type`, if given, must be the role
/// (1.6.1's words), and a disaggregated role runs one rank per worker.
fn role_engine(
    source: &Source,
    at: &str,
    role: WorkerRole,
    engine: EngineSection,
    launch: Launch,
) -> Result<EngineArgs, ScenarioError> {
    let written = engine.worker_type.is_some();
    let mut args = engine_args(source, at, engine, launch)?;
    if written && args.common.role != role {
        let message = match role {
            WorkerRole::Aggregated => format!(
                "offline replay only supports aggregated workers, got {} (give `workers.prefill` and `workers.decode` for disaggregated serving)",
                args.common.role.dynamo_name()
            ),
            _ => format!(
                "disaggregated serving requires {}_engine_args.worker_type={}, got {}",
                role.label(),
                role.label(),
                args.common.role.dynamo_name()
            ),
        };
        return Err(source.at(&format!("{at}.engine.worker_type"), message));
    }
    args.common.role = role;
    Ok(args)
}

/// The prefill pools' KV transfer settings time every transfer: they must agree, and a decode
/// pool's, if it gives any, must be the same (1.6.1 would ignore them; a scenario that says
/// two things is refused instead).
fn check_transfers(
    source: &Source,
    pools: &[WorkerPool],
    raw: &RawWorkers,
) -> Result<(), ScenarioError> {
    let Some(first) = pools
        .iter()
        .find(|p| p.engine.common.role == WorkerRole::Prefill)
    else {
        return Ok(());
    };
    let transfer = first.engine.common.kv_transfer;
    for (index, pool) in pools.iter().enumerate() {
        let stated = pool.engine.common.kv_transfer != Default::default();
        let agrees = pool.engine.common.kv_transfer == transfer;
        let checked = pool.engine.common.role == WorkerRole::Prefill || stated;
        if checked && !agrees {
            let at = pool_path(raw, pools, index);
            return Err(source.at(
                &format!("{at}.engine.kv_transfer_bandwidth"),
                format!(
                    "the KV transfer settings of pool `{}` disagree with prefill pool `{}`'s: the prefill engine's settings time every transfer, so give them once, on the prefill role",
                    pool.name, first.name
                ),
            ));
        }
    }
    Ok(())
}

/// The path of pool `index` of `pools` as `workers:` wrote it: its role's form (`workers`,
/// `workers.prefill`, `workers.decode`), and in the `pools` form its entry in that list.
pub(super) fn pool_path(raw: &RawWorkers, pools: &[WorkerPool], index: usize) -> String {
    let role = pools[index].engine.common.role;
    let (at, listed) = match role {
        WorkerRole::Aggregated => ("workers", raw.pools.is_some()),
        WorkerRole::Prefill => ("workers.prefill", listed(raw.prefill.as_ref())),
        WorkerRole::Decode => ("workers.decode", listed(raw.decode.as_ref())),
    };
    match listed {
        true => {
            let first = pools
                .iter()
                .position(|p| p.engine.common.role == role)
                .unwrap_or(0);
            format!("{at}.pools[{}]", index - first)
        }
        false => at.to_string(),
    }
}

/// Whether a role's workers are written as `pools`.
fn listed(form: Option<&RawRole>) -> bool {
    form.is_some_and(|f| f.pools.is_some())
}

/// Longest pool name in bytes.
pub const MAX_POOL_NAME_BYTES: usize = 64;

/// A pool's name: present, unique, and a plain identifier (an ASCII letter, then letters,
/// digits, `_` or `-`), since it is a `--set` path step and part of `classes.csv` column names.
/// Errors name the entry by index (`workers.pools[1].name`): its name is what is wrong.
fn pool_name(
    source: &Source,
    at: &str,
    name: Option<&str>,
    earlier: &[WorkerPool],
) -> Result<String, ScenarioError> {
    let fail = |path: &str, message: String| {
        let mut error = source.at(path, message);
        error.field_path = format!("{at}.name");
        error
    };
    let Some(name) = name else {
        return Err(fail(at, "a pool needs a `name`".into()));
    };
    let field = format!("{at}.name");
    let identifier = name.len() <= MAX_POOL_NAME_BYTES
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !identifier {
        return Err(fail(
            &field,
            format!(
                "`{}` is not a pool name: an ASCII letter, then letters, digits, `_` or `-`, at most {MAX_POOL_NAME_BYTES} bytes",
                name.escape_debug()
            ),
        ));
    }
    if earlier.iter().any(|p| p.name == name) {
        return Err(fail(
            &field,
            format!("pool `{name}` is named twice: pool names are unique"),
        ));
    }
    Ok(name.to_string())
}
