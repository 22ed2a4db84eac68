//! Approvals: how the pipeline asks whoever is attached to a session, and what it can hear back.
//! The daemon implements [`Approver`] over JSON-RPC (`approval/request` to every attached
//! connection that declared `approvals`, first valid answer wins); tests implement it directly.

use std::future::Future;
use std::pin::Pin;

use toold_protocol::{ApprovalAnswer, ApprovalRequestParams};

/// What came back from an approval request.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalReply {
    /// A valid answer, and who gave it (for the audit log).
    Answer(ApprovalAnswer, Option<ApproverIdentity>),
    /// An error answer or an invalid one: the call ends `permission_canceled` with this reason.
    Failed(String),
    /// Every approver went away before answering: `permission_canceled`.
    Disconnected,
    /// Every approver declined to decide (`-32005`), the last saying this: as with no approver
    /// attached, `permission_denied`.
    Declined(String),
}

/// The future of one approval request; dropping it withdraws the request.
pub type ApprovalFuture = Pin<Box<dyn Future<Output = ApprovalReply> + Send + 'static>>;

/// Whoever can approve a session's calls.
pub trait Approver: Send + Sync {
    fn request(&self, params: ApprovalRequestParams) -> ApprovalFuture;
}

/// Who answered an approval: the name its connection gave in `initialize`, and its process as
/// the socket's peer credentials gave it when it connected (which it cannot forge).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApproverIdentity {
    pub client_name: Option<String>,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
}
