//! Every router instance of a run, and the one answer to "which router?": requests arrive at
//! the entry router (the only one, or the prefill pool's), which alone hears KV events and
//! ticks; in disaggregated serving a decode worker's handoffs, tokens and ends go to the
//! decode router. A third router is one more field here and one more arm in `for_role`.

use super::driver::RouterDriver;
use crate::mocker::WorkerRole;
use crate::scheduling::types::RequestId;

pub(super) struct Routers {
    entry: RouterDriver,
    /// The decode pool's router (`None`: aggregated serving).
    decode: Option<RouterDriver>,
}

impl Routers {
    pub fn new(entry: RouterDriver, decode: Option<RouterDriver>) -> Routers {
        Routers { entry, decode }
    }

    /// The router requests arrive at, which hears KV events and ticks.
    pub fn entry(&mut self) -> &mut RouterDriver {
        &mut self.entry
    }

    pub fn entry_ref(&self) -> &RouterDriver {
        &self.entry
    }

    /// The router that hears of a worker of `role`: the decode router for a decode worker
    /// when there is one, else the entry router.
    pub fn for_role(&mut self, role: WorkerRole) -> &mut RouterDriver {
        match (&mut self.decode, role) {
            (Some(decode), WorkerRole::Decode) => decode,
            _ => &mut self.entry,
        }
    }

    /// The router that hears tokens: they come only from aggregated and decode workers.
    pub fn for_tokens(&mut self) -> &mut RouterDriver {
        self.for_role(WorkerRole::Decode)
    }

    /// The decode router of a disaggregated run.
    pub fn decode(&mut self) -> Option<&mut RouterDriver> {
        self.decode.as_mut()
    }

    /// Which router holds request `id` and how, if any: while its source has yet to let go
    /// of it (`releasing`), only the decode router's booking counts; otherwise the entry
    /// router's, then the decode router's.
    pub fn holds(&self, id: RequestId, releasing: bool) -> Option<String> {
        match &self.decode {
            Some(decode) if releasing => decode.holds(id),
            Some(decode) => self.entry.holds(id).or_else(|| decode.holds(id)),
            None => self.entry.holds(id),
        }
    }

    /// Every router's own invariants.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.entry.core().check_invariants()?;
        match &self.decode {
            Some(decode) => decode.core().check_invariants(),
            None => Ok(()),
        }
    }

    /// At the end of a drained run: Err unless every router let go of every request.
    pub fn check_drained(&self) -> Result<(), String> {
        self.entry.check_drained()?;
        match &self.decode {
            Some(decode) => decode.check_drained(),
            None => Ok(()),
        }
    }
}
