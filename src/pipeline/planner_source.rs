//! The native planner as a policy source: a planner configuration, started afresh over each
//! run's fleet; and a scenario's `planner:` as the source it names.

use super::policy_process::{PolicyCommand, PolicySource};
use crate::planner::NativePlanner;
use crate::planner::config::PlannerConfig;
use crate::scenario::Planner;
use crate::sim::WorkerPool;
use crate::sim::scaling::ScalingPolicy;
use std::path::PathBuf;
use std::sync::Arc;

/// A planner configuration, ready to plan each run it is given.
#[derive(Clone, Debug)]
pub struct PlannerSource {
    pub config: PlannerConfig,
    /// The file it came from, for messages.
    pub path: PathBuf,
}

impl PolicySource for PlannerSource {
    fn start(&self, pools: &[WorkerPool]) -> Result<Box<dyn ScalingPolicy>, String> {
        Ok(Box::new(NativePlanner::new(self.config.clone(), pools)?))
    }

    fn name(&self) -> String {
        format!("planner `{}`", self.path.display())
    }
}

/// The policy source of scenario `name`'s `planner:`: its command, or the native planner.
pub fn of_scenario(name: &str, planner: &Planner) -> Arc<dyn PolicySource> {
    match planner {
        Planner::Process {
            command,
            dir,
            timeout,
        } => Arc::new(PolicyCommand {
            command: command.clone(),
            dir: dir.clone(),
            timeout: *timeout,
        }),
        Planner::Native(config) => Arc::new(PlannerSource {
            config: config.clone(),
            path: PathBuf::from(format!("{name}: planner")),
        }),
    }
}
