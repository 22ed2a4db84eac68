//! Sessions as the daemon keeps them: created, attached to connections, updated, saved and
//! restored; each with its running batches, its approvals and its event log. Above the call
//! pipeline (whose view of a session is `pipeline::session`).

pub(crate) mod approvals;
pub mod client;
pub(crate) mod forward;
pub mod live;
pub mod log;
pub mod sessions;
pub mod store;
