//! A scaling policy run as a process (`replay --scaling-policy CMD`, a scenario's
//! `planner: {command}`): routersim writes each question as one JSON line on the process's
//! stdin and reads one JSON line back within a time limit, so a policy that dies, hangs or
//! answers garbage ends the run with a clear error instead of a hung or half-written one.
//!
//! The questions: `{"call": "initial_tick_ms"}`, answered `{"initial_tick_ms": MS | null}`;
//! then at each tick `{"call": "on_tick", "snapshot": {...}}` (1.6.1's snapshot), answered
//! `{"target_prefill": N | null, "target_decode": N | null, "next_tick_ms": MS | null}`.

use crate::mocker::WorkerRole;
use crate::mocker::launch::launch_config_json;
use crate::sim::WorkerPool;
use crate::sim::scaling::{ScalingDecision, ScalingPolicy, ScalingSnapshot};
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The longest answer line read (1 MiB): a longer one is garbage, not a decision.
const MAX_LINE_BYTES: u64 = 1 << 20;

/// The most of the process's stderr kept, to show with an error (its last 4 KiB).
const STDERR_TAIL_BYTES: usize = 4096;

/// Starts a run's scaling policy, a fresh one for each run (a [`PolicyCommand`] starts a
/// process).
pub trait PolicySource: std::fmt::Debug + Send + Sync {
    /// A policy ready to be asked about a fleet of `pools`; Err says why it could not start.
    fn start(&self, pools: &[WorkerPool]) -> Result<Box<dyn ScalingPolicy>, String>;

    /// How errors name it, e.g. "scaling policy `./policy.sh`".
    fn name(&self) -> String;
}

/// A policy command as given: run by `sh -c` in `dir`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyCommand {
    pub command: String,
    /// Where it runs (a scenario's directory; the working directory for a replay).
    pub dir: PathBuf,
    /// The longest it may take to answer one question.
    pub timeout: Duration,
}

impl PolicySource for PolicyCommand {
    fn start(&self, pools: &[WorkerPool]) -> Result<Box<dyn ScalingPolicy>, String> {
        Ok(Box::new(PolicyProcess::start(self, &engine_env(pools))?))
    }

    fn name(&self) -> String {
        format!("scaling policy `{}`", self.command)
    }
}

/// The engines a policy process is told of, in Dynamo 1.6.1's launch-config JSON: the
/// aggregated workers' as `ROUTERSIM_ENGINE_ARGS`, or the prefill and decode workers' as
/// `ROUTERSIM_PREFILL_ENGINE_ARGS` and `ROUTERSIM_DECODE_ENGINE_ARGS` (each role's first
/// pool: the one a policy scales). Dynamo's planner sizes its workers from them.
pub fn engine_env(pools: &[WorkerPool]) -> Vec<(&'static str, String)> {
    let first = |role: WorkerRole| pools.iter().find(|p| p.engine.common.role == role);
    let json = |pool: &WorkerPool| launch_config_json(&pool.engine).to_string();
    match (first(WorkerRole::Prefill), first(WorkerRole::Decode)) {
        (Some(prefill), Some(decode)) => vec![
            ("ROUTERSIM_PREFILL_ENGINE_ARGS", json(prefill)),
            ("ROUTERSIM_DECODE_ENGINE_ARGS", json(decode)),
        ],
        _ => pools
            .first()
            .map(|pool| ("ROUTERSIM_ENGINE_ARGS", json(pool)))
            .into_iter()
            .collect(),
    }
}

/// A running policy process.
pub struct PolicyProcess {
    child: Child,
    /// The process's stdin: a socket, not a pipe, so that writing to a process that died is
    /// an error rather than a SIGPIPE that would end routersim (which keeps SIGPIPE's
    /// default action; a socket write never raises it).
    stdin: Option<UnixStream>,
    lines: Receiver<Result<String, String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The thread keeping the stderr tail: done once the process's stderr closes.
    stderr_reader: thread::JoinHandle<()>,
    timeout: Duration,
}

impl PolicyProcess {
    /// Starts `command` with the environment variables `env` added; Err says why it could
    /// not start.
    pub fn start(command: &PolicyCommand, env: &[(&str, String)]) -> Result<PolicyProcess, String> {
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("could not start it: {e}"))?;
        // A scenario in the working directory has an empty directory: the working one.
        let dir = match command.dir.as_os_str().is_empty() {
            true => std::path::Path::new("."),
            false => command.dir.as_path(),
        };
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&command.command)
            .current_dir(dir)
            .envs(env.iter().map(|(key, value)| (key, value)))
            // Its own process group, so that whatever it starts is stopped with it.
            .process_group(0)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("could not start it: {e}"))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr_pipe = child.stderr.take().expect("stderr is piped");
        let (send, lines) = mpsc::channel();
        thread::spawn(move || read_lines(stdout, send));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let tail = Arc::clone(&stderr);
        let stderr_reader = thread::spawn(move || keep_tail(stderr_pipe, &tail));
        Ok(PolicyProcess {
            stdin: Some(ours),
            child,
            lines,
            stderr,
            stderr_reader,
            timeout: command.timeout,
        })
    }

    /// Asks `question` and returns the answer object.
    fn ask(&mut self, question: &Value) -> Result<Map<String, Value>, String> {
        let mut line = question.to_string();
        line.push('\n');
        let sent = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.flush()),
            None => Ok(()),
        };
        if sent.is_err() {
            return Err(self.gone("stopped reading its input"));
        }
        let answer = match self.lines.recv_timeout(self.timeout) {
            Ok(Ok(answer)) => answer,
            Ok(Err(message)) => return Err(message),
            Err(RecvTimeoutError::Timeout) => {
                let limit = self.timeout.as_secs_f64();
                return Err(format!("no answer within {limit} s"));
            }
            Err(RecvTimeoutError::Disconnected) => return Err(self.gone("closed its output")),
        };
        match serde_json::from_str::<Value>(&answer) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(format!(
                "its answer is not a JSON object: {}",
                clip(&answer)
            )),
            Err(e) => Err(format!("its answer is not JSON ({e}): {}", clip(&answer))),
        }
    }

    /// Why the process is no longer there to answer: `what` it did, its exit status if it
    /// has one, and the end of its stderr.
    fn gone(&mut self, what: &str) -> String {
        let mut status = None;
        // Bounded: until the process is reaped and its stderr read, or about 200 ms.
        for _ in 0..40 {
            if status.is_none() {
                status = self.child.try_wait().ok().flatten();
            }
            if status.is_some() && self.stderr_reader.is_finished() {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        let exited = status.map_or(String::new(), |s| format!(" ({s})"));
        let tail = self
            .stderr
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let tail = tail.unwrap_or_default();
        match tail.trim() {
            "" => format!("the process {what}{exited}"),
            text => format!("the process {what}{exited}; its stderr ends: {text}"),
        }
    }
}

impl Drop for PolicyProcess {
    /// The run is over (or failed): the process's input is closed and it has up to a second
    /// to exit; then its process group (it and whatever it started) is killed. No policy
    /// process outlives its run.
    fn drop(&mut self) {
        drop(self.stdin.take());
        // Bounded: until the process is reaped, or about a second.
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
        if let Ok(group) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with a process group id and a signal number; no memory is
            // shared. The group is the child's own (`process_group(0)`).
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ScalingPolicy for PolicyProcess {
    fn initial_tick_ms(&mut self) -> Result<Option<f64>, String> {
        let answer = self.ask(&json!({"call": "initial_tick_ms"}))?;
        optional_number(&answer, "initial_tick_ms")
    }

    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> Result<ScalingDecision, String> {
        let answer = self.ask(&json!({"call": "on_tick", "snapshot": snapshot}))?;
        decision(&answer)
    }
}

/// A decision from an answer, checked as 1.6.1 checks one: each of the three keys present
/// (in this order), targets null or whole numbers 0 or more, the next tick null or a number.
/// Other keys are ignored, as 1.6.1 ignores them, but for an optional `reason` (a string, at
/// most [`REASON_MAX_CHARS`] characters), kept with the scaling events.
pub fn decision(answer: &Map<String, Value>) -> Result<ScalingDecision, String> {
    let reason = match answer.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.chars().count() <= REASON_MAX_CHARS => Some(text.clone()),
        Some(value) => {
            let message = format!(
                "`reason` is {value}: a string of at most {REASON_MAX_CHARS} characters, or null"
            );
            return Err(message);
        }
    };
    Ok(ScalingDecision {
        target_prefill: target(answer, "target_prefill")?,
        target_decode: target(answer, "target_decode")?,
        next_tick_ms: optional_number(answer, "next_tick_ms")?,
        reason,
    })
}

/// The longest reason a policy may give for a decision (it lands in scaling.csv).
pub const REASON_MAX_CHARS: usize = 200;

fn target(answer: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match answer.get(key) {
        None => Err(format!("its answer has no `{key}`")),
        Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) => Ok(Some(n)),
            None => Err(format!(
                "`{key}` is {value}: a target is a whole number, 0 or more, or null"
            )),
        },
    }
}

fn optional_number(answer: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    match answer.get(key) {
        None => Err(format!("its answer has no `{key}`")),
        Some(Value::Null) => Ok(None),
        Some(value) => match value.as_f64() {
            Some(ms) => Ok(Some(ms)),
            None => Err(format!("`{key}` is {value}: a time in ms, or null")),
        },
    }
}

/// The start of a long answer, for an error message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Sends each line of `stdout` (at most [`MAX_LINE_BYTES`]) until it ends or the receiver
/// is gone.
fn read_lines(stdout: impl Read, send: mpsc::Sender<Result<String, String>>) {
    let mut reader = BufReader::new(stdout);
    // One line per iteration; ends with the stream.
    loop {
        let mut line = Vec::new();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line);
        let message = match read {
            Ok(0) => return,
            Ok(_) if !line.ends_with(b"\n") && line.len() as u64 == MAX_LINE_BYTES => {
                Err(format!("its answer is longer than {MAX_LINE_BYTES} bytes"))
            }
            Ok(_) => Ok(String::from_utf8_lossy(&line).trim_end().to_string()),
            Err(e) => Err(format!("reading its answer failed: {e}")),
        };
        let failed = message.is_err();
        if send.send(message).is_err() || failed {
            return;
        }
    }
}

/// Keeps the last [`STDERR_TAIL_BYTES`] of `stderr` in `tail` until it ends.
fn keep_tail(mut stderr: impl Read, tail: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 4096];
    // One read per iteration; ends with the stream.
    while let Ok(n @ 1..) = stderr.read(&mut buf) {
        let Ok(mut kept) = tail.lock() else { return };
        kept.extend_from_slice(&buf[..n]);
        let excess = kept.len().saturating_sub(STDERR_TAIL_BYTES);
        kept.drain(..excess);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(text: &str, timeout_ms: u64) -> PolicyCommand {
        PolicyCommand {
            command: text.to_string(),
            dir: PathBuf::from("."),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    fn answer(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_decision_needs_every_key_and_whole_targets() {
        let ok = decision(&answer(
            r#"{"target_prefill": null, "target_decode": 3, "next_tick_ms": 1000.5, "x": 1}"#,
        ));
        assert_eq!(
            ok,
            Ok(ScalingDecision {
                target_prefill: None,
                target_decode: Some(3),
                next_tick_ms: Some(1000.5),
                reason: None,
            })
        );
        let reasoned = decision(&answer(
            r#"{"target_prefill": null, "target_decode": 3, "next_tick_ms": null, "reason": "load up"}"#,
        ));
        assert_eq!(reasoned.unwrap().reason.as_deref(), Some("load up"));
        let long = format!(
            r#"{{"target_prefill": null, "target_decode": 3, "next_tick_ms": null, "reason": "{}"}}"#,
            "x".repeat(REASON_MAX_CHARS + 1)
        );
        assert!(decision(&answer(&long)).unwrap_err().contains("`reason`"));
        let missing = decision(&answer(r#"{"target_decode": 2, "next_tick_ms": null}"#));
        assert_eq!(missing, Err("its answer has no `target_prefill`".into()));
        for bad in ["-1", "2.5", "\"2\""] {
            let text = format!(
                r#"{{"target_prefill": null, "target_decode": {bad}, "next_tick_ms": null}}"#
            );
            let err = decision(&answer(&text)).unwrap_err();
            assert!(err.contains("a whole number"), "{bad}: {err}");
        }
    }

    /// The policy is told of the engines it scales, in 1.6.1's launch-config form: one
    /// variable for aggregated workers, one per role for disaggregated ones.
    #[test]
    fn a_policy_process_is_told_its_engines() {
        use crate::mocker::EngineArgs;
        let pool = |role: WorkerRole| {
            let mut engine = EngineArgs::default();
            engine.common.role = role;
            WorkerPool::unnamed(1, engine)
        };
        let aggregated = engine_env(&[pool(WorkerRole::Aggregated)]);
        assert_eq!(aggregated.len(), 1);
        assert_eq!(aggregated[0].0, "ROUTERSIM_ENGINE_ARGS");
        let launch: Value = serde_json::from_str(&aggregated[0].1).unwrap();
        assert_eq!(launch["engine"]["num_gpu_blocks"], 16384);
        let split = engine_env(&[pool(WorkerRole::Prefill), pool(WorkerRole::Decode)]);
        let names: Vec<&str> = split.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            names,
            [
                "ROUTERSIM_PREFILL_ENGINE_ARGS",
                "ROUTERSIM_DECODE_ENGINE_ARGS"
            ]
        );
        // The variable reaches the process.
        let script = r#"read q; case "$ROUTERSIM_ENGINE_ARGS" in *num_gpu_blocks*) t=1;; *) t=2;; esac; echo "{\"initial_tick_ms\": $t}""#;
        let mut policy = PolicyProcess::start(&command(script, 5_000), &aggregated).unwrap();
        assert_eq!(policy.initial_tick_ms(), Ok(Some(1.0)));
    }

    #[test]
    fn a_process_that_answers_is_asked_in_turn() {
        let script = r#"read q; echo '{"initial_tick_ms": 250}'; read q; echo '{"target_prefill": null, "target_decode": 2, "next_tick_ms": null}'"#;
        let mut policy = PolicyProcess::start(&command(script, 5_000), &[]).unwrap();
        assert_eq!(policy.initial_tick_ms(), Ok(Some(250.0)));
        let snapshot = ScalingSnapshot::new(
            0,
            250.0,
            Default::default(),
            Default::default(),
            Default::default(),
            Default::default(),
        );
        assert_eq!(policy.on_tick(&snapshot).unwrap().target_decode, Some(2));
        drop(policy);
    }

    #[test]
    fn a_process_that_dies_hangs_or_babbles_gives_a_clear_error() {
        let cases = [
            ("echo oops >&2; exit 3", "oops"),
            ("read q; sleep 5", "no answer within 0.3 s"),
            ("read q; echo 'not json'", "is not JSON"),
            ("read q; echo '[1]'", "not a JSON object"),
        ];
        for (script, expected) in cases {
            let mut policy = PolicyProcess::start(&command(script, 300), &[]).unwrap();
            let err = policy.initial_tick_ms().unwrap_err();
            assert!(err.contains(expected), "{script}: {err}");
        }
    }
}
