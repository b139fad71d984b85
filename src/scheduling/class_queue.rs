//! One policy class's queue: the shared heap, exact-worker lanes and the blocked-lane index.
