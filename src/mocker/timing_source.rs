//! The timing an engine config picks (its `timing_model`): one of the built-in
//! [`TimingModel`]s, as an enum so that a pass's timing is a match, not an indirect call.

use super::profile::TimingProfile;
use super::timing::{DecodeBatch, DynamoPolynomial, FixedTiming, PrefillBatch, TimingModel};
use std::sync::Arc;

/// How a pass's prefill and decode steps are timed (the engine's `timing_model`): one of the
/// built-in [`TimingModel`]s, chosen by the engine config. An enum rather than a boxed trait
/// object, so a pass's timing is a match, not an indirect call.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TimingSource {
    /// Dynamo's default polynomials ([`DynamoPolynomial`]).
    #[default]
    Polynomial,
    /// Constant times, whatever the batch's size (1.6.1's `{type: fixed}`).
    Fixed(FixedTiming),
    /// Interpolated from a planner profile (`planner_profile_data`).
    Profile(Arc<TimingProfile>),
}

impl TimingSource {
    /// The profile file or directory this model reads, if any.
    pub fn profile_source(&self) -> Option<&str> {
        match self {
            TimingSource::Profile(profile) => Some(profile.source()),
            _ => None,
        }
    }
}

impl TimingModel for TimingSource {
    fn prefill_batch_ms(&self, batch: &PrefillBatch) -> f64 {
        match self {
            TimingSource::Polynomial => DynamoPolynomial.prefill_batch_ms(batch),
            TimingSource::Fixed(fixed) => fixed.prefill_batch_ms(batch),
            TimingSource::Profile(profile) => profile.prefill_batch_ms(batch),
        }
    }

    fn decode_batch_ms(&self, batch: &DecodeBatch, kv_capacity_tokens: u64) -> f64 {
        match self {
            TimingSource::Polynomial => DynamoPolynomial.decode_batch_ms(batch, kv_capacity_tokens),
            TimingSource::Fixed(fixed) => fixed.decode_batch_ms(batch, kv_capacity_tokens),
            TimingSource::Profile(profile) => profile.decode_batch_ms(batch, kv_capacity_tokens),
        }
    }
}
