//! `Client`: one connection to the daemon (initialized), a typed method for every
//! client→daemon request, and `reconnect` for frontends that outlive a daemon restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::json;
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use toold_protocol::methods::{self, RequestMethod};
use toold_protocol::sync::RwLockUnpoisoned;
use toold_protocol::{
    CancelParams, CancelResult, CloseReason, ExecuteParams, InitializeParams, InitializeResult,
    PROTOCOL_VERSION, Peer, PeerHandle, PeerOptions, SessionAttachParams, SessionCreateParams,
    SessionIdParams, SessionListParams, SessionSnapshot, SessionUpdateParams, ToolDefinition,
    ToolsListParams, ToolsListResult, ToolsRegisterParams, ToolsUnregisterParams, error_code,
};

use crate::error::ClientError;
use crate::events::{ClientEvent, Events};
use crate::execution::Execution;
use crate::handlers::{ConnectionHandler, deliver};
use crate::options::ClientOptions;
use crate::tracking::{AttachedSession, Tracking};

/// A connection to the daemon. Cheap to clone; every clone talks over the same connection
/// (the current one, after [`reconnect`](Client::reconnect)), which closes when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    options: ClientOptions,
    /// The sending end of [`Events`], given to each connection: the stream outlives them.
    events: mpsc::Sender<ClientEvent>,
    tracking: Arc<Tracking>,
    /// Replaced whole by `reconnect`; a std lock because it is only held to clone the `Arc`.
    connection: RwLock<Arc<Connection>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The connection's tasks hold no handle to the client: without this, a connection
        // nobody can use any more would stay open until the daemon closes it.
        self.connection.get_mut_unpoisoned().peer.close();
    }
}

/// One initialized connection.
#[derive(Debug)]
struct Connection {
    peer: PeerHandle,
    initialized: InitializeResult,
    socket: PathBuf,
}

/// What [`Client::reconnect`] did.
#[derive(Debug)]
pub struct ReconnectReport {
    /// The daemon is another process than before (it restarted): sessions were restored
    /// from its state, and their replay is truncated unless every event had been seen.
    pub instance_changed: bool,
    pub previous_instance_id: String,
    /// The new connection's `initialize` result.
    pub initialized: InitializeResult,
    /// The client tools registered again (their names, sorted), or why they could not be.
    /// Empty when the client had registered none.
    pub tools: Result<Vec<String>, ClientError>,
    /// Every session that was attached, in session id order.
    pub sessions: Vec<Reattached>,
}

/// One session's reattachment.
#[derive(Debug)]
pub struct Reattached {
    pub session_id: String,
    /// The `after_seq` asked for: the last event this client had put on its stream.
    pub after_seq: u64,
    /// The snapshot, or why the session could not be attached (`-32004` when the daemon no
    /// longer has it; the client then forgets it).
    pub result: Result<SessionSnapshot, ClientError>,
}

impl Reattached {
    /// Whether events after `after_seq` were lost: the daemon no longer retained them (a
    /// restarted daemon retains none of its earlier events).
    pub fn replay_truncated(&self) -> bool {
        self.result
            .as_ref()
            .is_ok_and(|snapshot| snapshot.replay_truncated)
    }
}

impl Client {
    /// Connects, sends `initialize` (declaring the capabilities of the installed answerers)
    /// and returns the client with its event stream.
    pub async fn connect(options: ClientOptions) -> Result<(Client, Events), ClientError> {
        let (events, receiver) = mpsc::channel(options.event_capacity());
        let tracking = Arc::new(Tracking::default());
        let connection = open(&options, &events, &tracking).await?;
        let client = Client {
            inner: Arc::new(Inner {
                options,
                events,
                tracking,
                connection: RwLock::new(Arc::new(connection)),
            }),
        };
        Ok((client, Events::new(receiver)))
    }

    fn connection(&self) -> Arc<Connection> {
        // Only ever held to clone or replace the `Arc`: a poisoned lock is still consistent.
        let current = self.inner.connection.read_unpoisoned();
        Arc::clone(&current)
    }

    /// The daemon's `initialize` result: its version, `instance_id` and capabilities.
    pub fn initialized(&self) -> InitializeResult {
        self.connection().initialized.clone()
    }

    /// Identifies the daemon process; it changes when the daemon restarts.
    pub fn instance_id(&self) -> String {
        self.connection().initialized.instance_id.clone()
    }

    /// The socket this client connected to.
    pub fn socket_path(&self) -> PathBuf {
        self.connection().socket.clone()
    }

    /// The connection itself, for what the typed methods do not cover.
    pub fn peer(&self) -> PeerHandle {
        self.connection().peer.clone()
    }

    /// Sends any typed request: `client.call::<methods::SessionGet>(params)`. Sessions
    /// created or attached this way are not remembered for [`reconnect`](Self::reconnect):
    /// use the typed methods for those.
    pub async fn call<M: RequestMethod>(
        &self,
        params: M::Params,
    ) -> Result<M::Result, ClientError> {
        self.peer()
            .call::<M>(&params)
            .await
            .map_err(|error| ClientError::from_request(M::METHOD, error))
    }

    /// `session/create`. This connection is attached to the new session.
    pub async fn session_create(
        &self,
        params: SessionCreateParams,
    ) -> Result<SessionSnapshot, ClientError> {
        let snapshot = self.call::<methods::SessionCreate>(params).await?;
        self.inner.tracking.attached(&snapshot);
        Ok(snapshot)
    }

    /// `session/attach`: with `after_seq`, the retained events after it are replayed (on the
    /// event stream) before this returns; the snapshot says `replay_truncated` when some
    /// were no longer retained.
    pub async fn session_attach(
        &self,
        session_id: &str,
        after_seq: Option<u64>,
    ) -> Result<SessionSnapshot, ClientError> {
        let snapshot = self
            .call::<methods::SessionAttach>(SessionAttachParams {
                session_id: session_id.to_owned(),
                after_seq,
            })
            .await?;
        self.inner.tracking.attached(&snapshot);
        Ok(snapshot)
    }

    /// `session/detach`: no more events of that session on this connection.
    pub async fn session_detach(&self, session_id: &str) -> Result<(), ClientError> {
        self.call::<methods::SessionDetach>(id_params(session_id))
            .await?;
        self.inner.tracking.forget(session_id);
        Ok(())
    }

    /// `session/update`: absent fields stay as they are.
    pub async fn session_update(
        &self,
        params: SessionUpdateParams,
    ) -> Result<SessionSnapshot, ClientError> {
        self.call::<methods::SessionUpdate>(params).await
    }

    /// `session/get`.
    pub async fn session_get(&self, session_id: &str) -> Result<SessionSnapshot, ClientError> {
        self.call::<methods::SessionGet>(id_params(session_id))
            .await
    }

    /// `session/list`: every session of the daemon.
    pub async fn session_list(&self) -> Result<Vec<SessionSnapshot>, ClientError> {
        let listed = self
            .call::<methods::SessionList>(SessionListParams::default())
            .await?;
        Ok(listed.sessions)
    }

    /// `session/close`: cancels its batches and ends it for everyone.
    pub async fn session_close(&self, session_id: &str) -> Result<(), ClientError> {
        self.call::<methods::SessionClose>(id_params(session_id))
            .await?;
        self.inner.tracking.forget(session_id);
        Ok(())
    }

    /// `tools/list`, with any of its filters.
    pub async fn tools_list(
        &self,
        params: ToolsListParams,
    ) -> Result<ToolsListResult, ClientError> {
        self.call::<methods::ToolsList>(params).await
    }

    /// `tools/register`: tools this client runs through its
    /// [`on_tool_invoke`](ClientOptions::on_tool_invoke) answerer, removed when the
    /// connection closes and registered again by [`reconnect`](Self::reconnect). Returns the
    /// registry's new revision.
    pub async fn tools_register(
        &self,
        tools: Vec<ToolDefinition>,
        replace: bool,
    ) -> Result<u64, ClientError> {
        let params = ToolsRegisterParams { tools, replace };
        let revision = self.call::<methods::ToolsRegister>(params.clone()).await?;
        self.inner.tracking.registered(&params.tools);
        Ok(revision.revision)
    }

    /// `tools/unregister` of this client's own tools. Returns the registry's new revision.
    pub async fn tools_unregister(&self, names: Vec<String>) -> Result<u64, ClientError> {
        let params = ToolsUnregisterParams { names };
        let revision = self
            .call::<methods::ToolsUnregister>(params.clone())
            .await?;
        self.inner.tracking.unregistered(&params.names);
        Ok(revision.revision)
    }

    /// `tools/execute`: sent at once; await the [`Execution`] for the results, cancel it
    /// with [`Execution::cancel`]. Read the event stream meanwhile (see [`Events`]).
    pub fn tools_execute(&self, params: ExecuteParams) -> Execution {
        Execution::start(&self.peer(), serde_json::to_value(params))
    }

    /// `tools/cancel`: the ids of the calls it reached.
    pub async fn tools_cancel(&self, params: CancelParams) -> Result<CancelResult, ClientError> {
        self.call::<methods::ToolsCancel>(params).await
    }

    /// `$/cancelRequest` for one of this client's requests by its wire id (a
    /// `tools/execute` still gets its answer, with canceled results).
    pub async fn cancel_request(&self, request_id: i64) -> Result<(), ClientError> {
        self.peer()
            .notify(methods::CANCEL_REQUEST, Some(json!({ "id": request_id })))
            .await
            .map_err(|_| ClientError::Closed {
                method: methods::CANCEL_REQUEST.to_owned(),
            })
    }

    /// The sessions this client is attached to, with the last `seq` seen of each.
    pub fn attached_sessions(&self) -> Vec<AttachedSession> {
        self.inner.tracking.sessions()
    }

    /// Connects again with the same options (the daemon restarted, or the connection
    /// broke), re-initializes, registers again the client tools registered through
    /// [`tools_register`](Self::tools_register), and re-attaches every attached session with
    /// `after_seq` set to the last event seen, so that the event stream continues without a
    /// gap when the daemon still has the events, and says so when it does not. The old
    /// connection is closed first, so that no event arrives twice. Replayed events go to the
    /// event stream before this returns, so keep reading it meanwhile (see [`Events`]).
    pub async fn reconnect(&self) -> Result<ReconnectReport, ClientError> {
        let previous = self.connection();
        previous.peer.close();
        let fresh = Arc::new(
            open(
                &self.inner.options,
                &self.inner.events,
                &self.inner.tracking,
            )
            .await?,
        );
        *self.inner.connection.write_unpoisoned() = Arc::clone(&fresh);
        // Before the sessions: a call replayed or resumed there may need them.
        let tools = self.register_again().await;
        let mut sessions = Vec::new();
        for AttachedSession {
            session_id,
            last_seq,
        } in self.inner.tracking.sessions()
        {
            let result = self.session_attach(&session_id, Some(last_seq)).await;
            if let Err(error) = &result
                && error.rpc_code() == Some(error_code::UNKNOWN_SESSION)
            {
                self.inner.tracking.forget(&session_id);
            }
            sessions.push(Reattached {
                session_id,
                after_seq: last_seq,
                result,
            });
        }
        Ok(ReconnectReport {
            instance_changed: fresh.initialized.instance_id != previous.initialized.instance_id,
            previous_instance_id: previous.initialized.instance_id.clone(),
            initialized: fresh.initialized.clone(),
            tools,
            sessions,
        })
    }

    /// Registers the tracked tools on the new connection. A daemon that is still the same
    /// process unregisters the old connection's tools only once it has seen that connection
    /// close, which may come after the new one's request: a refusal that names one of them as
    /// already registered is tried again, for [`REREGISTER_PATIENCE`] at most.
    async fn register_again(&self) -> Result<Vec<String>, ClientError> {
        let tools = self.inner.tracking.tools();
        if tools.is_empty() {
            return Ok(Vec::new());
        }
        let names = tools.iter().map(|tool| tool.name.clone()).collect();
        let params = ToolsRegisterParams {
            tools,
            replace: false,
        };
        let deadline = tokio::time::Instant::now() + REREGISTER_PATIENCE;
        loop {
            match self.call::<methods::ToolsRegister>(params.clone()).await {
                Ok(_) => return Ok(names),
                Err(error)
                    if error.already_registered().is_some()
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Closes the connection (what is queued is still sent).
    pub fn close(&self) {
        self.connection().peer.close();
    }

    /// Waits until the current connection has ended, and says why.
    pub async fn closed(&self) -> CloseReason {
        self.peer().closed().await
    }
}

/// How long [`Client::reconnect`] keeps trying to register its tools again while the daemon
/// still holds them for the old connection.
const REREGISTER_PATIENCE: Duration = Duration::from_secs(5);

fn id_params(session_id: &str) -> SessionIdParams {
    SessionIdParams {
        session_id: session_id.to_owned(),
    }
}

/// Connects to the socket the options name and initializes the connection.
async fn open(
    options: &ClientOptions,
    events: &mpsc::Sender<ClientEvent>,
    tracking: &Arc<Tracking>,
) -> Result<Connection, ClientError> {
    let socket = options.socket_path();
    let stream = UnixStream::connect(&socket)
        .await
        .map_err(|source| ClientError::Connect {
            path: socket.clone(),
            source,
        })?;
    let (reader, writer) = stream.into_split();
    let handler = ConnectionHandler::new(
        options.handlers().clone(),
        events.clone(),
        Arc::clone(tracking),
    );
    let (peer, task) = Peer::spawn(
        reader,
        writer,
        PeerOptions::client(options.framing()),
        Arc::new(handler),
    );
    let watcher_events = events.clone();
    let watcher_tracking = Arc::clone(tracking);
    tokio::spawn(async move {
        let reason = task.await;
        // A local close is the owner's own doing (`close`, `reconnect`): nothing to report.
        if !matches!(reason, CloseReason::ClosedLocally)
            && let Some(wait) = deliver(
                &watcher_events,
                &watcher_tracking,
                ClientEvent::Disconnected { reason },
            )
        {
            wait.await;
        }
    });
    match initialize(&peer, options, &socket).await {
        Ok(initialized) => Ok(Connection {
            peer,
            initialized,
            socket,
        }),
        Err(error) => {
            peer.close();
            Err(error)
        }
    }
}

async fn initialize(
    peer: &PeerHandle,
    options: &ClientOptions,
    socket: &Path,
) -> Result<InitializeResult, ClientError> {
    let params = InitializeParams {
        protocol_version: PROTOCOL_VERSION,
        client_info: Some(options.client_info().clone()),
        capabilities: options.capabilities(),
    };
    let initialized = peer
        .call::<methods::Initialize>(&params)
        .await
        .map_err(|error| ClientError::from_request(methods::INITIALIZE, error))?;
    if initialized.protocol_version != PROTOCOL_VERSION {
        return Err(ClientError::protocol(
            methods::INITIALIZE,
            format!(
                "toold at {} speaks protocol version {}, this client {PROTOCOL_VERSION}",
                socket.display(),
                initialized.protocol_version
            ),
        ));
    }
    Ok(initialized)
}
