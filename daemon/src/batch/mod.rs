//! Batches: the plan (which calls run together) and the runner.

pub mod plan;
