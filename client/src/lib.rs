//! toold-client: the async Rust client library for the toold daemon.
//!
//! [`Client::connect`] finds the socket as the daemon does (`TOOLD_SOCKET`,
//! `$XDG_RUNTIME_DIR/toold/toold.sock`, `/tmp/toold-$UID/toold.sock`, unless
//! [`ClientOptions::with_socket`] names one), sends `initialize`, and returns the [`Client`]
//! with its [`Events`]. The client has one typed method per client→daemon request
//! (`session_*`, `tools_*`, [`Client::cancel_request`]); [`Client::tools_execute`] returns an
//! [`Execution`] that can be canceled. Answerers installed on [`ClientOptions`]
//! (`on_approval`, `on_pre_tool_use`, `on_post_tool_use`, `on_tool_invoke`) answer the
//! daemon's requests and declare the matching capabilities; a request without one is answered
//! `-32601`. An approval answerer installed with `on_approval_or_decline` may decline
//! ([`Approval::Decline`]) and leave the approval to the session's other approvers. [`Client::reconnect`] connects again after a daemon restart and re-attaches every
//! session after the last event seen.
//!
//! The connection is `toold_protocol`'s peer, the same one the daemon runs.
//!
//! ```no_run
//! use toold_client::{Client, ClientEvent, ClientOptions};
//! use toold_client::protocol::{
//!     ApprovalAnswer, ApprovalDecision, Event, ExecuteParams, SessionCreateParams, ToolCall,
//! };
//!
//! # async fn run() -> Result<(), toold_client::ClientError> {
//! let options = ClientOptions::new("my-agent").on_approval(|request| async move {
//!     println!("allowing {} ({})", request.call.name, request.reason);
//!     ApprovalAnswer::new(ApprovalDecision::AllowOnce)
//! });
//! let (client, mut events) = Client::connect(options).await?;
//! // Events are read on a task of their own: the stream is bounded, and a full stream holds
//! // the daemon back (see `Events`).
//! tokio::spawn(async move {
//!     while let Some(event) = events.recv().await {
//!         if let ClientEvent::Session(Event::Output(output)) = event {
//!             print!("{}", output.body.data);
//!         }
//!     }
//! });
//! let session = client.session_create(SessionCreateParams::new("/home/me/project")).await?;
//! let batch = client
//!     .tools_execute(ExecuteParams {
//!         session_id: session.session_id,
//!         iteration: 0,
//!         calls: vec![ToolCall::new(
//!             "call_1",
//!             "run_command",
//!             serde_json::json!({"command": "cargo test"}),
//!         )],
//!     })
//!     .await?;
//! println!("{}", batch.results[0].result.content);
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod events;
mod execution;
mod handlers;
mod options;
mod tracking;

pub use client::{Client, Reattached, ReconnectReport};
pub use error::ClientError;
pub use events::{ClientEvent, Events};
pub use execution::{Canceller, Execution};
pub use handlers::Approval;
pub use options::ClientOptions;
pub use toold_protocol as protocol;
pub use tracking::AttachedSession;
