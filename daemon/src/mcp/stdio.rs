//! The stdio transport of an MCP server: newline-delimited JSON-RPC over its process's stdin
//! and stdout, framed here. rmcp's session reads and writes every message through it, typed,
//! except `tools/call`: a call is written here straight onto the server's stdin, and what the
//! server sends about it (its progress, then its answer, as raw JSON) waits in the call's
//! inbox in the order sent, around rmcp's service loop (a channel hop, a task spawned per
//! write, a progress subscription per call, and a typed reading of the result that tries each
//! of rmcp's result types in turn).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use rmcp::RoleClient;
use rmcp::model::{NumberOrString, ProgressNotificationParam, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::Notify;
use toold_protocol::sync::LockUnpoisoned;

use skipped::SkippedLine;

mod skipped;

/// Every id of a call sent here starts so; rmcp's own requests have numeric ids, so the two
/// never meet.
const CALL_ID_PREFIX: &str = "toold-";

/// How many progress updates of a call wait for its reader at most. A server may send progress
/// faster than the call's events reach a slow client; beyond this, updates are dropped (the
/// next one says more), and the answer always has its place.
const PROGRESS_QUEUED: usize = 16;

/// The server's stdin, shared by rmcp's writes and the calls'; `None` once closed.
type Writer = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// What the server sends about a call.
#[derive(Debug)]
pub(crate) enum CallNews {
    /// `notifications/progress` naming the call's progress token.
    Progress(ProgressNotificationParam),
    /// Its answer: its `result` as the server wrote it, or its JSON-RPC error's message.
    Answer(Result<Box<RawValue>, String>),
}

/// Where a call's news waits for the call to take it, in the order sent: at most
/// [`PROGRESS_QUEUED`] progress updates, then its answer. (A channel would allocate a block of
/// slots per call; a call has one reader and one writer, and mostly an answer alone.)
#[derive(Default)]
struct Inbox {
    queued: Mutex<Queued>,
    /// Woken when news is queued or none will come; one waiter, so a wake-up before it waits
    /// is kept as `Notify`'s permit.
    arrived: Notify,
}

#[derive(Default)]
struct Queued {
    news: VecDeque<CallNews>,
    progress: usize,
    /// Set once the answer is queued or the server's output ended: nothing more comes.
    ended: bool,
}

impl Inbox {
    fn put(&self, news: CallNews, number: u64) {
        {
            let mut queued = self.queued.lock_unpoisoned();
            match news {
                CallNews::Progress(_) if queued.progress == PROGRESS_QUEUED => {
                    tracing::debug!(
                        number,
                        "an MCP call's progress dropped: its reader is behind"
                    );
                    return;
                }
                CallNews::Progress(_) => queued.progress += 1,
                CallNews::Answer(_) => queued.ended = true,
            }
            queued.news.push_back(news);
        }
        self.arrived.notify_one();
    }

    fn end(&self) {
        self.queued.lock_unpoisoned().ended = true;
        self.arrived.notify_one();
    }
}

/// The calls in flight, by their number, each with where its news goes.
#[derive(Default)]
struct Waiting {
    calls: HashMap<u64, Arc<Inbox>>,
    /// Set once the server's output ended: nothing more will be answered.
    closed: bool,
}

/// Sends `tools/call` requests to the server and routes their answers back.
pub(crate) struct StdioCalls {
    writer: Writer,
    waiting: Mutex<Waiting>,
    next: AtomicU64,
}

/// A call sent and not yet answered; dropping it forgets the call (what the server sends
/// about it later is dropped).
pub(crate) struct SentCall {
    number: u64,
    inbox: Arc<Inbox>,
    calls: Arc<StdioCalls>,
}

impl SentCall {
    /// The call's JSON-RPC id, which `notifications/cancelled` names.
    pub(crate) fn request_id(&self) -> RequestId {
        NumberOrString::String(call_id(self.number).into())
    }

    /// What the server sent next about the call, in the order it sent it; `None` when its
    /// output ended before the answer.
    pub(crate) async fn next(&mut self) -> Option<CallNews> {
        loop {
            {
                let mut queued = self.inbox.queued.lock_unpoisoned();
                if let Some(news) = queued.news.pop_front() {
                    if matches!(news, CallNews::Progress(_)) {
                        queued.progress -= 1;
                    }
                    return Some(news);
                }
                if queued.ended {
                    return None;
                }
            }
            self.inbox.arrived.notified().await;
        }
    }
}

impl Drop for SentCall {
    fn drop(&mut self) {
        self.calls
            .waiting
            .lock_unpoisoned()
            .calls
            .remove(&self.number);
    }
}

fn call_id(number: u64) -> String {
    format!("{CALL_ID_PREFIX}{number}")
}

/// The number of a call's id or progress token (`"toold-17"`, as raw JSON), if it is one.
fn call_number(id: &RawValue) -> Option<u64> {
    number_in(id.get().strip_prefix('"')?.strip_suffix('"')?)
}

/// The number of a call's id (`toold-17`, between its quotes), if it is one.
fn number_in(id: &str) -> Option<u64> {
    id.strip_prefix(CALL_ID_PREFIX)?.parse().ok()
}

#[derive(Serialize)]
struct CallRequest<'a> {
    jsonrpc: &'static str,
    id: &'a str,
    method: &'static str,
    params: CallParams<'a>,
}

#[derive(Serialize)]
struct CallParams<'a> {
    name: &'a str,
    arguments: &'a Map<String, Value>,
    #[serde(rename = "_meta")]
    meta: CallMeta<'a>,
}

/// The request's `_meta`: its progress token is its id, unique among the calls.
#[derive(Serialize)]
struct CallMeta<'a> {
    #[serde(rename = "progressToken")]
    progress_token: &'a str,
    #[serde(flatten)]
    envelope: &'a Map<String, Value>,
}

impl StdioCalls {
    /// Writes `tools/call` of `name`, its `_meta` holding its progress token and `envelope`
    /// (what the agreed protocol version asks every request to carry). Fails when the server's
    /// output has ended or its stdin cannot be written.
    pub(crate) async fn send(
        self: &Arc<Self>,
        name: &str,
        arguments: &Map<String, Value>,
        envelope: &Map<String, Value>,
    ) -> io::Result<SentCall> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let id = call_id(number);
        let mut line = serde_json::to_vec(&CallRequest {
            jsonrpc: "2.0",
            id: &id,
            method: "tools/call",
            params: CallParams {
                name,
                arguments,
                meta: CallMeta {
                    progress_token: &id,
                    envelope,
                },
            },
        })?;
        line.push(b'\n');
        let inbox = Arc::new(Inbox::default());
        {
            let mut waiting = self.waiting.lock_unpoisoned();
            if waiting.closed {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the server's output ended",
                ));
            }
            waiting.calls.insert(number, Arc::clone(&inbox));
        }
        // Registered before it is written, so that nothing the server sends about it can come
        // before the call is known.
        let sent = SentCall {
            number,
            inbox,
            calls: Arc::clone(self),
        };
        write_whole_line(&self.writer, line).await?;
        Ok(sent)
    }

    /// Hands `line` to the call it is about (its answer, or progress naming its token); false if
    /// it is about no call sent here.
    fn route(&self, line: &[u8]) -> bool {
        #[derive(Deserialize)]
        struct Message<'a> {
            #[serde(borrow, default)]
            id: Option<&'a RawValue>,
            #[serde(borrow, default)]
            method: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            params: Option<&'a RawValue>,
            #[serde(borrow, default)]
            result: Option<&'a RawValue>,
            #[serde(borrow, default)]
            error: Option<&'a RawValue>,
        }
        #[derive(Deserialize)]
        struct Token<'a> {
            #[serde(borrow, rename = "progressToken")]
            progress_token: &'a RawValue,
        }
        #[derive(Deserialize)]
        struct ErrorMessage {
            message: String,
        }
        let Ok(message) = serde_json::from_slice::<Message<'_>>(line) else {
            return false;
        };
        let (number, news) = match message.method.as_deref() {
            None => {
                let Some(number) = message.id.and_then(call_number) else {
                    return false;
                };
                let answer = match (message.result, message.error) {
                    (_, Some(error)) => Err(serde_json::from_str::<ErrorMessage>(error.get())
                        .map_or_else(|_| error.get().to_owned(), |error| error.message)),
                    (Some(result), None) => Ok(result.to_owned()),
                    (None, None) => Err("an answer with neither a result nor an error".to_owned()),
                };
                (number, CallNews::Answer(answer))
            }
            Some("notifications/progress") => {
                let Some(params) = message.params else {
                    return false;
                };
                let Some(number) = serde_json::from_str::<Token<'_>>(params.get())
                    .ok()
                    .and_then(|token| call_number(token.progress_token))
                else {
                    return false;
                };
                match serde_json::from_str(params.get()) {
                    Ok(progress) => (number, CallNews::Progress(progress)),
                    Err(err) => {
                        tracing::debug!(%err, "an MCP server sent unreadable progress");
                        return true;
                    }
                }
            }
            Some(_) => return false,
        };
        self.deliver(number, news);
        true
    }

    /// A line over the length limit was skipped: when it was a call's answer, the call fails.
    fn skipped(&self, line: &SkippedLine) {
        if let Some(number) = line.answer_id().and_then(number_in) {
            let limit = DEFAULT_MAX_LINE_LENGTH >> 20;
            let why = format!("its answer was over the {limit} MiB limit on one message");
            self.deliver(number, CallNews::Answer(Err(why)));
        }
    }

    fn deliver(&self, number: u64, news: CallNews) {
        // Absent when the call was stopped meanwhile: its news is not wanted then.
        let inbox = {
            let mut waiting = self.waiting.lock_unpoisoned();
            match news {
                CallNews::Answer(_) => waiting.calls.remove(&number),
                CallNews::Progress(_) => waiting.calls.get(&number).cloned(),
            }
        };
        if let Some(inbox) = inbox {
            inbox.put(news, number);
        }
    }

    /// The server's output ended: the calls in flight and every later one end.
    fn close(&self) {
        let mut waiting = self.waiting.lock_unpoisoned();
        waiting.closed = true;
        for (_, inbox) in waiting.calls.drain() {
            inbox.end();
        }
    }
}

/// Writes `line` whole onto the server's stdin. A line begun is always finished, even when the
/// caller stops waiting (a call stopped while the pipe is full): half a line would corrupt
/// every message after it. Most lines go in at once, without a task.
async fn write_whole_line(writer: &Writer, line: Vec<u8>) -> io::Result<()> {
    let guard = Arc::clone(writer).lock_owned().await;
    let mut write = Box::pin(async move {
        let mut guard = guard;
        let stdin = guard.as_mut().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotConnected, "the server's stdin is closed")
        })?;
        stdin.write_all(&line).await?;
        stdin.flush().await
    });
    match (&mut write).now_or_never() {
        Some(written) => written,
        None => {
            tokio::spawn(async move {
                if let Err(err) = write.await {
                    tracing::debug!(%err, "cannot write to an MCP server");
                }
            });
            Ok(())
        }
    }
}

/// The transport rmcp's session runs over; see the module's docs.
pub(crate) struct StdioTransport {
    reader: BufReader<ChildStdout>,
    line: Vec<u8>,
    /// Set while the rest of a line over the length limit is skipped.
    skipping: Option<SkippedLine>,
    calls: Arc<StdioCalls>,
}

impl StdioTransport {
    /// The transport, and the handle its calls go through.
    pub(crate) fn new(stdout: ChildStdout, stdin: ChildStdin) -> (Self, Arc<StdioCalls>) {
        let calls = Arc::new(StdioCalls {
            writer: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            waiting: Mutex::default(),
            next: AtomicU64::new(1),
        });
        let transport = Self {
            reader: BufReader::new(stdout),
            line: Vec::new(),
            skipping: None,
            calls: Arc::clone(&calls),
        };
        (transport, calls)
    }

    /// Reads the next whole line into `self.line` (without its newline); false at the end of
    /// the output. Cancel-safe: a line read in part is kept and continued at the next call.
    /// Lines over [`DEFAULT_MAX_LINE_LENGTH`] are skipped, never held whole; a call whose
    /// answer such a line was fails.
    async fn read_line(&mut self) -> io::Result<bool> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(false);
            }
            let newline = memchr::memchr(b'\n', available);
            let take = newline.map_or(available.len(), |at| at + 1);
            let ended = newline.is_some();
            if let Some(skipped) = &mut self.skipping {
                skipped.feed(&available[..take]);
            } else if self.line.len() + take > DEFAULT_MAX_LINE_LENGTH {
                tracing::warn!(
                    limit = DEFAULT_MAX_LINE_LENGTH,
                    "an MCP server sent a message over the length limit; it is skipped"
                );
                let mut skipped = SkippedLine::default();
                skipped.feed(&self.line);
                skipped.feed(&available[..take]);
                // Not kept for the next line: its capacity is the limit's.
                self.line = Vec::new();
                self.skipping = Some(skipped);
            } else {
                self.line.extend_from_slice(&available[..take]);
                if ended {
                    self.reader.consume(take);
                    self.line.pop();
                    if self.line.last() == Some(&b'\r') {
                        self.line.pop();
                    }
                    return Ok(true);
                }
            }
            if ended && let Some(skipped) = self.skipping.take() {
                self.calls.skipped(&skipped);
            }
            self.reader.consume(take);
        }
    }
}

impl Transport<RoleClient> for StdioTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = Arc::clone(&self.calls.writer);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            write_whole_line(&writer, line).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        // rmcp drops this future whenever another of its events comes first: a line read in
        // part stays in `self.line` until it is whole, and only a whole line is cleared.
        loop {
            match self.read_line().await {
                Ok(true) => {}
                Ok(false) => break,
                Err(err) => {
                    tracing::debug!(%err, "cannot read from an MCP server");
                    break;
                }
            }
            let line = self
                .line
                .strip_prefix(b"\xEF\xBB\xBF")
                .unwrap_or(&self.line);
            let message = if line.iter().all(u8::is_ascii_whitespace) || self.calls.route(line) {
                None
            } else {
                serde_json::from_slice(line)
                    // What is not a message of MCP's is skipped, as the MCP SDKs do.
                    .inspect_err(|err| {
                        tracing::debug!(%err, "an MCP server sent what is not a message");
                    })
                    .ok()
            };
            self.line.clear();
            if message.is_some() {
                return message;
            }
        }
        self.calls.close();
        None
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.calls.writer.lock().await.take();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::process::Stdio;
    use std::time::Duration;

    use rmcp::model::ServerNotification;
    use serde_json::json;

    use super::*;

    #[test]
    fn only_the_ids_of_calls_sent_here_are_taken() {
        let raw = |text: &str| RawValue::from_string(text.to_owned()).unwrap();
        assert_eq!(call_number(&raw("\"toold-17\"")), Some(17));
        assert_eq!(call_number(&raw("17")), None);
        assert_eq!(call_number(&raw("\"17\"")), None);
        assert_eq!(call_number(&raw("\"toold-x\"")), None);
        assert_eq!(call_number(&raw("\"toold-17\\u0000\"")), None);
    }

    /// A server, in Python, that answers each `tools/call` as its `name` says, writing its lines
    /// in pieces with pauses between them (so that reads end mid-line), with a notification for
    /// rmcp and a line that is no JSON before each answer.
    const SERVER: &str = r#"
import json, sys, time
def out(text, pieces=3):
    step = max(1, len(text) // pieces)
    for at in range(0, len(text), step):
        sys.stdout.write(text[at:at + step]); sys.stdout.flush(); time.sleep(0.005)
for line in sys.stdin:
    request = json.loads(line)
    params = request["params"]
    token = params["_meta"]["progressToken"]
    name = params["name"]
    if name == "exit":
        sys.exit(0)
    if name == "huge":
        # Over the limit, the id after the result (as Node's SDK writes it), a decoy inside;
        # a notification over the limit first, which is no answer.
        big = "x" * (17 << 20)
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"data": big}}) + "\n")
        sys.stdout.write(json.dumps({"result": {"id": "toold-0", "content": [{"type": "text",
            "text": big}]}, "jsonrpc": "2.0", "id": request["id"]}) + "\n")
        sys.stdout.flush()
        continue
    if name == "flood":
        sys.stdout.write("".join(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step}}) + "\n" for step in range(10000)))
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}) + "\n")
        sys.stdout.flush()
        continue
    for step in (1, 2):
        out(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step, "total": 2}}) + "\n")
    out(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "for rmcp"}}) + "\n")
    out("this is no JSON\n\n")
    if name == "fail":
        answer = {"error": {"code": -32602, "message": "no such tool"}}
    else:
        answer = {"result": {"content": [{"type": "text", "text": params["arguments"]["say"]}],
                             "meta": params["_meta"]}}
    out(json.dumps(dict(answer, jsonrpc="2.0", id=request["id"])) + "\n")
"#;

    /// The transport on a real process, rmcp's side of it read by a task that gives up each
    /// read after a millisecond (as rmcp's service loop drops a read when another event comes
    /// first): what it reads, and the calls' handle.
    fn start() -> (
        Server,
        Arc<StdioCalls>,
        tokio::sync::mpsc::UnboundedReceiver<RxJsonRpcMessage<RoleClient>>,
    ) {
        let mut command = tokio::process::Command::new("python3");
        command
            .args(["-c", SERVER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let (mut child, known) =
            crate::process_tree::spawn_known(|| command.spawn(), tokio::process::Child::id)
                .expect("python3");
        let (mut transport, calls) =
            StdioTransport::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let (read_to, read) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                match tokio::time::timeout(Duration::from_millis(1), transport.receive()).await {
                    Ok(Some(message)) => drop(read_to.send(message)),
                    Ok(None) => return,
                    Err(_) => {}
                }
            }
        });
        let server = Server {
            child,
            _known: known,
        };
        (server, calls, read)
    }

    /// The server's process, recorded as one the daemon started (`spawn_known`), as the daemon
    /// records every process it starts: the process-tree tests running beside these sweep up
    /// any other child of this process as a command's orphan. Killed when dropped, then
    /// forgotten.
    struct Server {
        child: tokio::process::Child,
        _known: Option<crate::process_tree::KnownChild>,
    }

    /// What the server sends about `sent`, up to its answer; fails if that takes 10 s (a line
    /// lost would leave the call waiting for ever).
    async fn news_to_the_answer(sent: &mut SentCall) -> Vec<CallNews> {
        let wait = async {
            let mut news = Vec::new();
            while let Some(item) = sent.next().await {
                let answered = matches!(item, CallNews::Answer(_));
                news.push(item);
                if answered {
                    break;
                }
            }
            news
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .expect("no answer within 10 s")
    }

    /// Sends the test server's `echo` of `say`.
    async fn echo(calls: &Arc<StdioCalls>, say: &str) -> SentCall {
        calls
            .send(
                "echo",
                json!({"say": say}).as_object().unwrap(),
                &Map::new(),
            )
            .await
            .unwrap()
    }

    /// The progress values among `news`, in order.
    fn progress_of(news: &[CallNews]) -> Vec<f64> {
        news.iter()
            .filter_map(|item| match item {
                CallNews::Progress(update) => Some(update.progress),
                CallNews::Answer(_) => None,
            })
            .collect()
    }

    /// The successful answer that ends `news`.
    fn answer_of(news: &[CallNews]) -> Value {
        let Some(CallNews::Answer(Ok(result))) = news.last() else {
            panic!("{news:?}");
        };
        serde_json::from_str(result.get()).unwrap()
    }

    /// The text of the successful answer that ends `news`.
    fn answered_text(news: &[CallNews]) -> Value {
        answer_of(news)["content"][0]["text"].take()
    }

    #[tokio::test]
    async fn a_call_gets_its_progress_then_its_answer_and_rmcp_the_rest() {
        let (_server, calls, mut read) = start();
        let envelope = Map::from_iter([("io.example/key".to_owned(), json!("kept"))]);
        let mut sent = calls
            .send("echo", json!({"say": "hi"}).as_object().unwrap(), &envelope)
            .await
            .unwrap();
        let news = news_to_the_answer(&mut sent).await;
        let progress = progress_of(&news);
        assert_eq!(progress, [1.0, 2.0]);
        let result = answer_of(&news);
        assert_eq!(result["content"][0]["text"], "hi");
        // The request's `_meta`: the progress token (the call's id) and the envelope.
        assert_eq!(result["meta"]["progressToken"], json!(sent.request_id()));
        assert_eq!(result["meta"]["io.example/key"], "kept");
        // rmcp got the notification that was not about the call, whole, and nothing else.
        let message = read.recv().await.unwrap();
        assert!(
            matches!(
                &message,
                rmcp::model::JsonRpcMessage::Notification(notice)
                    if matches!(notice.notification, ServerNotification::LoggingMessageNotification(_))
            ),
            "{message:?}"
        );
        assert!(read.try_recv().is_err());

        let mut failed = calls.send("fail", &Map::new(), &Map::new()).await.unwrap();
        let news = news_to_the_answer(&mut failed).await;
        assert!(
            matches!(news.last(), Some(CallNews::Answer(Err(message))) if message == "no such tool"),
            "{news:?}"
        );
    }

    #[tokio::test]
    async fn a_flood_of_progress_is_bounded_and_the_answer_still_comes_after_it() {
        let (_server, calls, _read) = start();
        let mut flooded = calls.send("flood", &Map::new(), &Map::new()).await.unwrap();
        // The server answers in order: once this later call has its answer, every line about
        // the flooded call was routed while nobody read its news.
        let mut later = echo(&calls, "after").await;
        let news = news_to_the_answer(&mut later).await;
        assert!(
            matches!(news.last(), Some(CallNews::Answer(Ok(_)))),
            "{news:?}"
        );

        let news = news_to_the_answer(&mut flooded).await;
        let progress = progress_of(&news);
        // The first updates, those that found room; the rest were dropped, not held.
        let kept: Vec<f64> = (0..PROGRESS_QUEUED).map(|step| step as f64).collect();
        assert_eq!(progress, kept);
        assert!(
            matches!(news.last(), Some(CallNews::Answer(Ok(_)))),
            "{news:?}"
        );
    }

    #[tokio::test]
    async fn an_answer_over_the_length_limit_fails_its_call_at_once() {
        let (_server, calls, mut read) = start();
        let mut huge = calls.send("huge", &Map::new(), &Map::new()).await.unwrap();
        let news = news_to_the_answer(&mut huge).await;
        assert!(
            matches!(news.as_slice(), [CallNews::Answer(Err(why))] if why.contains("16 MiB")),
            "{news:?}"
        );
        // The next line is read whole, and the skipped notification reached nobody.
        let mut after = echo(&calls, "after").await;
        let news = news_to_the_answer(&mut after).await;
        assert_eq!(answered_text(&news), "after");
        let message = serde_json::to_value(read.recv().await.unwrap()).unwrap();
        assert_eq!(message["params"]["data"], "for rmcp", "{message}");
    }

    #[tokio::test]
    async fn a_call_forgotten_loses_nothing_and_an_ended_output_ends_every_call() {
        let (mut server, calls, _read) = start();
        // Dropped at once: its news, when it comes, goes nowhere, and the next call is whole.
        drop(echo(&calls, "lost").await);
        let mut kept = echo(&calls, "kept").await;
        let news = news_to_the_answer(&mut kept).await;
        assert_eq!(answered_text(&news), "kept");

        let mut ended = calls.send("exit", &Map::new(), &Map::new()).await.unwrap();
        assert!(news_to_the_answer(&mut ended).await.is_empty());
        server.child.wait().await.unwrap();
        let after = calls.send("echo", &Map::new(), &Map::new()).await;
        assert!(after.is_err());
    }
}
