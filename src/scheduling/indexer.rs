//! The router's KV overlap indexer: which ranks hold which blocks, fed by KV events.
