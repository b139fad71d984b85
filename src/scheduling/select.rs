//! Worker eligibility, the default cost formula and the (seeded) pick among candidates.
