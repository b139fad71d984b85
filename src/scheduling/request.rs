//! The queued request's immutable snapshot (cost, cached tokens) and its in-class ordering key.
