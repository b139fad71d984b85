//! Generic discrete-event engine: events ordered by (time, insertion sequence), bounded runs.
