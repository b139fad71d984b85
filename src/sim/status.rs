//! How a request ended: the kind ([`EndStatus`], shared by the simulator, `requests.csv` and
//! the `count_status` expectation) and, for requests that did not complete, the typed reason
//! (`requests.csv`'s `reason` column prints its label).

use crate::mocker::RejectReason;
use crate::scheduling::scheduler::{SchedulerError, SchedulerErrorKind};

/// The kind of end a request reached, without its reason.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EndStatus {
    /// Still in the system when the run stopped (only after a limit).
    Pending,
    Completed,
    Rejected,
    Cancelled,
    Aborted,
}

impl EndStatus {
    /// Every kind, in the order `requests.csv` documents them.
    pub const ALL: [EndStatus; 5] = [
        EndStatus::Pending,
        EndStatus::Completed,
        EndStatus::Rejected,
        EndStatus::Cancelled,
        EndStatus::Aborted,
    ];

    /// The name `requests.csv`'s `status` column writes.
    pub fn label(self) -> &'static str {
        match self {
            EndStatus::Pending => "pending",
            EndStatus::Completed => "completed",
            EndStatus::Rejected => "rejected",
            EndStatus::Cancelled => "cancelled",
            EndStatus::Aborted => "aborted",
        }
    }

    /// The kind whose label is `label`.
    pub fn parse(label: &str) -> Option<EndStatus> {
        EndStatus::ALL.into_iter().find(|s| s.label() == label)
    }
}

/// Why a request was refused for good: by the router (Dynamo's error taxonomy; round robin
/// with no worker known refuses with `NoEndpoints` too) or by the worker rank it reached.
/// Of the router's error only its kind is kept: every request record holds a status, and
/// the error itself (a message, a rank) made each of them 48 bytes, boxed 16, where its kind
/// makes them 2.
#[derive(Clone, Debug, PartialEq)]
pub enum Rejection {
    Router(SchedulerErrorKind),
    Worker(RejectReason),
}

impl Rejection {
    /// The router's refusal `error`.
    pub fn router(error: SchedulerError) -> Rejection {
        Rejection::Router(error.error_kind())
    }

    /// The stable name `requests.csv`'s `reason` column writes.
    pub fn label(&self) -> &'static str {
        match self {
            Rejection::Router(kind) => kind.label(),
            Rejection::Worker(reason) => reason.label(),
        }
    }
}

/// Why a client gave up on a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CancelReason {
    /// A `cancel` fault drew it.
    ClientCancel,
}

impl CancelReason {
    /// The stable name `requests.csv`'s `reason` column writes.
    pub fn label(self) -> &'static str {
        match self {
            CancelReason::ClientCancel => "client_cancel",
        }
    }
}

/// Why a request in flight was lost.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// Its worker went down and it was not migrated (migration limit reached).
    WorkerDown,
}

impl AbortReason {
    /// The stable name `requests.csv`'s `reason` column writes.
    pub fn label(self) -> &'static str {
        match self {
            AbortReason::WorkerDown => "worker_down",
        }
    }
}

/// How a request ended, with why when it did not complete.
#[derive(Clone, Debug, PartialEq)]
pub enum Status {
    /// Still in the system when the run stopped (only after a limit).
    Pending,
    Completed,
    Rejected(Rejection),
    /// The client gave up (a `cancel` fault).
    Cancelled(CancelReason),
    /// Lost with its worker (and not migrated).
    Aborted(AbortReason),
}

impl Status {
    /// The kind of end, without the reason.
    pub fn kind(&self) -> EndStatus {
        match self {
            Status::Pending => EndStatus::Pending,
            Status::Completed => EndStatus::Completed,
            Status::Rejected(_) => EndStatus::Rejected,
            Status::Cancelled(_) => EndStatus::Cancelled,
            Status::Aborted(_) => EndStatus::Aborted,
        }
    }

    /// The kind's name, as `requests.csv`'s `status` column writes it.
    pub fn label(&self) -> &'static str {
        self.kind().label()
    }

    /// Why a request that did not complete ended (empty otherwise), as `requests.csv`'s
    /// `reason` column writes it.
    pub fn reason(&self) -> &'static str {
        match self {
            Status::Rejected(rejection) => rejection.label(),
            Status::Cancelled(reason) => reason.label(),
            Status::Aborted(reason) => reason.label(),
            Status::Pending | Status::Completed => "",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::types::WorkerWithDpRank;

    #[test]
    fn every_kind_parses_back_from_its_label() {
        let labels: Vec<&str> = EndStatus::ALL.map(EndStatus::label).to_vec();
        assert_eq!(
            labels,
            ["pending", "completed", "rejected", "cancelled", "aborted"]
        );
        for kind in EndStatus::ALL {
            assert_eq!(EndStatus::parse(kind.label()), Some(kind));
        }
        assert_eq!(EndStatus::parse("Completed"), None);
        assert_eq!(EndStatus::parse(""), None);
    }

    #[test]
    fn a_status_stays_two_words_as_every_record_holds_one() {
        assert!(std::mem::size_of::<Status>() <= 16);
    }

    #[test]
    fn a_status_prints_its_kind_and_reason_as_requests_csv_does() {
        let rank = WorkerWithDpRank::new(3, 0);
        let cases = [
            (Status::Pending, "pending", ""),
            (Status::Completed, "completed", ""),
            (
                Status::Rejected(Rejection::router(SchedulerError::NoEndpoints)),
                "rejected",
                "no_endpoints",
            ),
            (
                Status::Rejected(Rejection::router(SchedulerError::BookingFailed(
                    "no room".into(),
                ))),
                "rejected",
                "booking_failed",
            ),
            (
                Status::Rejected(Rejection::router(SchedulerError::PinnedWorkerGone(rank))),
                "rejected",
                "pinned_worker_gone",
            ),
            (
                Status::Rejected(Rejection::Worker(RejectReason::PromptOverMaxModelLen)),
                "rejected",
                "prompt_exceeds_max_model_len",
            ),
            (
                Status::Rejected(Rejection::Worker(RejectReason::PromptOverPool)),
                "rejected",
                "prompt_exceeds_kv_pool",
            ),
            (
                Status::Rejected(Rejection::Worker(RejectReason::SequenceOverPool)),
                "rejected",
                "sequence_exceeds_kv_pool",
            ),
            (
                Status::Rejected(Rejection::Worker(RejectReason::PromptOverTokenBudget)),
                "rejected",
                "prompt_exceeds_token_budget",
            ),
            (
                Status::Rejected(Rejection::Worker(RejectReason::Stalled)),
                "rejected",
                "worker_stalled",
            ),
            (
                Status::Cancelled(CancelReason::ClientCancel),
                "cancelled",
                "client_cancel",
            ),
            (
                Status::Aborted(AbortReason::WorkerDown),
                "aborted",
                "worker_down",
            ),
        ];
        for (status, label, reason) in cases {
            assert_eq!(
                (status.label(), status.reason()),
                (label, reason),
                "{status:?}"
            );
            assert_eq!(EndStatus::parse(label), Some(status.kind()));
        }
    }
}
