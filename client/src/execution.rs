//! `Execution`: a `tools/execute` in flight, which the caller can cancel (`$/cancelRequest`)
//! and still receive every call's result.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use toold_protocol::methods::{CANCEL_REQUEST, TOOLS_EXECUTE};
use toold_protocol::{ExecuteResult, PeerHandle, RequestError};

use crate::error::ClientError;

/// A running batch; resolves with its [`ExecuteResult`] (one result per call, in order).
///
/// The request is sent at once, whether or not this is polled. [`Execution::cancel`] (or a
/// [`Canceller`] from another task) asks the daemon to cancel the batch: calls stop or never
/// start, and the result still arrives, with `canceled` results. Dropping an `Execution`
/// before it resolves cancels the batch too, and forgets its answer.
#[derive(Debug)]
pub struct Execution {
    canceller: Canceller,
    task: JoinHandle<Result<Value, RequestError>>,
    finished: bool,
}

/// Cancels one [`Execution`] from anywhere; cheap to clone.
#[derive(Debug, Clone)]
pub struct Canceller {
    peer: PeerHandle,
    request_id: i64,
}

impl Canceller {
    /// Sends `$/cancelRequest` for the batch's request. The [`Execution`] still resolves
    /// with the batch's results.
    pub async fn cancel(&self) -> Result<(), ClientError> {
        self.peer
            .notify(CANCEL_REQUEST, Some(json!({ "id": self.request_id })))
            .await
            .map_err(|_| ClientError::Closed {
                method: CANCEL_REQUEST.to_owned(),
            })
    }

    /// The id of the `tools/execute` request on the wire.
    pub fn request_id(&self) -> i64 {
        self.request_id
    }
}

impl Execution {
    /// Sends `tools/execute` with `params` (already rendered) on `peer`.
    pub(crate) fn start(peer: &PeerHandle, params: Result<Value, serde_json::Error>) -> Self {
        let (request_id, task) = match params {
            Ok(params) => {
                let request = peer.request(TOOLS_EXECUTE, Some(params));
                // Spawned so that it is queued now, not at the caller's first poll.
                (request.id(), tokio::spawn(request))
            }
            Err(err) => {
                let error = RequestError::InvalidParams(err.to_string());
                (0, tokio::spawn(async move { Err(error) }))
            }
        };
        Self {
            canceller: Canceller {
                peer: peer.clone(),
                request_id,
            },
            task,
            finished: false,
        }
    }

    /// The id of the `tools/execute` request on the wire.
    pub fn request_id(&self) -> i64 {
        self.canceller.request_id
    }

    /// Cancels the batch; keep awaiting this for its results.
    pub async fn cancel(&self) -> Result<(), ClientError> {
        self.canceller.cancel().await
    }

    /// A handle that cancels this batch from another task.
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }
}

impl Future for Execution {
    type Output = Result<ExecuteResult, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let joined = match Pin::new(&mut self.task).poll(cx) {
            Poll::Ready(joined) => joined,
            Poll::Pending => return Poll::Pending,
        };
        self.finished = true;
        let outcome = match joined {
            Ok(Ok(value)) => serde_json::from_value(value)
                .map_err(|err| ClientError::protocol(TOOLS_EXECUTE, err)),
            Ok(Err(error)) => Err(ClientError::from_request(TOOLS_EXECUTE, error)),
            // The task is aborted only by our own drop, so this is the runtime shutting down.
            Err(err) => Err(ClientError::protocol(
                TOOLS_EXECUTE,
                format!("the request's task ended: {err}"),
            )),
        };
        Poll::Ready(outcome)
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        if !self.finished {
            // Dropping the request inside the task withdraws it: `$/cancelRequest` is sent.
            self.task.abort();
        }
    }
}
