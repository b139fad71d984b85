//! A scratch worker kind, built only for tests: every pass takes the same time and gives each
//! running request one token, with no KV cache and no batch budget. It exists to show (and
//! keep showing, by test) that a worker kind is an addition in the files
//! docs/architecture.md's "Adding a worker kind" names, and to run the simulator on a kind
//! that is not vLLM.

use crate::mocker::config::{Backend, EngineArgs};
use crate::mocker::protocol::{
    AddRequestError, Capacity, MockRequest, PassOutput, RequestPhase, RequestView, TokenOut,
    WorkerLoad, WorkerSetup,
};
use crate::mocker::step_memo::StepMemo;
use crate::mocker::traits::Worker;
use crate::scheduling::types::{RequestId, WorkerWithDpRank};
use crate::time::{SimDuration, SimTime};

pub use crate::mocker::config::FixedLatencyArgs;

/// One request on a fixed-latency rank.
#[derive(Debug)]
struct Running {
    request: MockRequest,
    generated_tokens: u64,
}

/// A fixed-latency rank: up to `max_running` requests run, the rest wait in arrival order.
#[derive(Debug)]
pub struct FixedLatencyWorker {
    rank: WorkerWithDpRank,
    pass_time: SimDuration,
    max_running: usize,
    waiting: std::collections::VecDeque<MockRequest>,
    running: Vec<Running>,
}

/// A fixed-latency rank `rank` of the engine `setup` names.
pub fn build(rank: WorkerWithDpRank, setup: &WorkerSetup) -> Box<dyn Worker> {
    let Backend::FixedLatency(args) = setup.engine.backend else {
        unreachable!("a fixed-latency rank runs fixed-latency engine arguments");
    };
    Box::new(FixedLatencyWorker {
        rank,
        pass_time: args.pass_time,
        max_running: setup.engine.common.capacity.max_num_seqs as usize,
        waiting: Default::default(),
        running: Vec::new(),
    })
}

/// What a fixed-latency rank of `engine` holds: its `max_num_seqs` requests, no KV blocks.
pub fn capacity(engine: &EngineArgs) -> Capacity {
    let limits = &engine.common.capacity;
    Capacity {
        max_running: limits.max_num_seqs,
        max_batched_tokens: limits.max_num_batched_tokens,
        kv_blocks: 0,
    }
}

impl FixedLatencyWorker {
    fn holds(&self, id: RequestId) -> bool {
        self.waiting.iter().any(|r| r.id == id) || self.running.iter().any(|r| r.request.id == id)
    }
}

impl Worker for FixedLatencyWorker {
    fn rank(&self) -> WorkerWithDpRank {
        self.rank
    }

    fn add_request(&mut self, _now: SimTime, request: MockRequest) -> Result<(), AddRequestError> {
        if request.prompt_tokens == 0 {
            return Err(AddRequestError::EmptyPrompt(request.id));
        }
        if self.holds(request.id) {
            return Err(AddRequestError::DuplicateId(request.id));
        }
        self.waiting.push_back(request);
        Ok(())
    }

    fn remove_request(&mut self, id: RequestId) -> Option<RequestView> {
        let view = self.request(id)?;
        self.waiting.retain(|r| r.id != id);
        self.running.retain(|r| r.request.id != id);
        Some(view)
    }

    fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    fn start_pass(&mut self, now: SimTime, _memo: &mut StepMemo, out: &mut PassOutput) -> SimTime {
        out.clear();
        while self.running.len() < self.max_running
            && let Some(request) = self.waiting.pop_front()
        {
            self.running.push(Running {
                request,
                generated_tokens: 0,
            });
        }
        for running in &mut self.running {
            running.generated_tokens += 1;
            let completed = running.generated_tokens >= running.request.max_output_tokens;
            out.tokens.push(TokenOut {
                id: running.request.id,
                first: running.generated_tokens == 1,
                completed,
                middle_unlisted: 0,
            });
        }
        let max_output = |r: &Running| r.generated_tokens >= r.request.max_output_tokens;
        self.running.retain(|r| !max_output(r));
        now.saturating_add(self.pass_time)
    }

    fn take_back(&mut self, out: &mut PassOutput) {
        out.clear();
    }

    fn held_requests(&self, out: &mut Vec<RequestId>) {
        out.extend(self.waiting.iter().map(|r| r.id));
        out.extend(self.running.iter().map(|r| r.request.id));
    }

    fn for_each_running(&self, f: &mut dyn FnMut(RequestId)) {
        for running in &self.running {
            f(running.request.id);
        }
    }

    fn request(&self, id: RequestId) -> Option<RequestView> {
        let view = |request: &MockRequest, phase, generated_tokens| RequestView {
            id,
            phase,
            prompt_tokens: request.prompt_tokens,
            max_output_tokens: request.max_output_tokens,
            generated_tokens,
            computed_tokens: request.prompt_tokens,
            held_blocks: 0,
            preemptions: 0,
        };
        if let Some(r) = self.running.iter().find(|r| r.request.id == id) {
            return Some(view(&r.request, RequestPhase::Running, r.generated_tokens));
        }
        let waiting = self.waiting.iter().find(|r| r.id == id)?;
        Some(view(waiting, RequestPhase::Waiting, 0))
    }

    fn load(&self) -> WorkerLoad {
        WorkerLoad {
            waiting: self.waiting.len(),
            running: self.running.len(),
            active_blocks: 0,
            max_running: self.max_running as u64,
            max_batched_tokens: 0,
        }
    }

    fn preemptions_total(&self) -> u64 {
        0
    }

    fn check_invariants(&self) -> Result<(), String> {
        match self.running.len() <= self.max_running {
            true => Ok(()),
            false => Err(format!(
                "{} running past {}",
                self.running.len(),
                self.max_running
            )),
        }
    }
}
