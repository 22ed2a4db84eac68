//! How `toold mcp serve` answers the approvals of its session: its own calls' are put to the
//! host's person, by `elicitation/create` on protocol versions that have server-to-client
//! requests, or (from `2026-07-28`, which has none) handed to the call waiting for them, which
//! asks by the input-required round trip; every other approval, and every one the host cannot
//! be asked, is declined with the rule that would allow the call.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputResponses,
    ProtocolVersion,
};
use rmcp::service::Peer;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use toold_client::Approval;
use toold_client::protocol::{ApprovalAnswer, ApprovalDecision, ApprovalRequestParams};

use super::super::preview::Drawing;
use super::super::{approve, visible};

/// The most bytes of a preview's diff an elicitation carries: hosts show the message in a
/// dialog, and a longer one gets scrolled past or cut where the host likes; the rest is said
/// to be cut.
const HOST_DIFF_BYTES: usize = 4 * 1024;

/// An approval handed to the call it is about, with where its answer goes.
pub struct Asked {
    pub request: ApprovalRequestParams,
    pub answer: oneshot::Sender<Approval>,
}

/// Who answers the session's approvals for this host.
pub struct Approvals {
    /// The host, once its MCP session is up.
    pub host: OnceLock<Peer<RoleServer>>,
    /// This process's call ids begin so (`mcp<pid>_`): its own approvals are told apart from
    /// those of a joined session's other clients.
    pub call_prefix: String,
    /// Calls that ask their host by the input-required round trip, by call id: their
    /// approvals go to them.
    round_trips: Mutex<HashMap<String, mpsc::Sender<Asked>>>,
}

impl Approvals {
    pub fn new(call_prefix: String) -> Self {
        Self {
            host: OnceLock::new(),
            call_prefix,
            round_trips: Mutex::default(),
        }
    }

    /// From now until [`Approvals::forget`], `call_id`'s approvals come out of the receiver.
    pub fn route(&self, call_id: &str) -> mpsc::Receiver<Asked> {
        let (sender, receiver) = mpsc::channel(1);
        self.routes().insert(call_id.to_owned(), sender);
        receiver
    }

    pub fn forget(&self, call_id: &str) {
        self.routes().remove(call_id);
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<Asked>>> {
        self.round_trips
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer to one approval request of the session.
    pub async fn answer(&self, request: ApprovalRequestParams) -> Approval {
        let rule = request.suggestions.first().cloned();
        if !request.call.id.starts_with(&self.call_prefix) {
            // Said with the rule too: when this is the last word, it reaches the model.
            return cannot_ask(
                rule.as_deref(),
                "`toold mcp serve` asks its host only about the host's own calls",
            );
        }
        let round_trip = self.routes().get(&request.call.id).cloned();
        if let Some(call) = round_trip {
            let (answer, answered) = oneshot::channel();
            if call.send(Asked { request, answer }).await.is_ok()
                && let Ok(approval) = answered.await
            {
                return approval;
            }
            return cannot_ask(rule.as_deref(), "the MCP host left before it answered");
        }
        let Some(peer) = self.host.get() else {
            return cannot_ask(rule.as_deref(), "the MCP host is not ready to be asked");
        };
        let Some(info) = peer.peer_info() else {
            return cannot_ask(rule.as_deref(), "the MCP host is not ready to be asked");
        };
        if info.capabilities.elicitation.is_none() {
            return cannot_ask(
                rule.as_deref(),
                "the MCP host cannot be asked (it offers no elicitation)",
            );
        }
        // Titled choices (`oneOf`) came with 2025-11-25; before it, `enum` with `enumNames`.
        let titled = info.protocol_version >= ProtocolVersion::V_2025_11_25;
        let form = match form(&request, titled) {
            Ok(form) => form,
            Err(why) => return cannot_ask(rule.as_deref(), &why),
        };
        match peer.create_elicitation(form).await {
            Ok(result) => decided(&result).into(),
            Err(error) => cannot_ask(
                rule.as_deref(),
                &format!("the MCP host could not be asked ({error})"),
            ),
        }
    }
}

/// A decline that says why the host was not asked and what would allow the call.
fn cannot_ask(rule: Option<&str>, why: &str) -> Approval {
    let allow = match rule {
        Some(rule) => format!(
            "; to allow it, add the rule '{rule}' (`toold mcp serve --allow '{rule}'`, or \
             `allow` in the config), or approve it with `toold watch`"
        ),
        None => "; approve it with `toold watch`".to_owned(),
    };
    Approval::Decline(format!("{why}{allow}"))
}

/// The form that asks the host's person about `request`: allow once / allow for this
/// session / deny; the choices titled by `oneOf` (`titled`, from 2025-11-25) or by
/// `enumNames`. What the model wrote is shown as the terminal prompt shows it: every control
/// character and invisible one made visible, long arguments' ends restated, so that a host
/// that cuts or renders the text cannot be made to hide part of the call; the preview's diff
/// without colour, cut at a line past [`HOST_DIFF_BYTES`], saying so.
pub fn form(request: &ApprovalRequestParams, titled: bool) -> Result<ElicitRequestParams, String> {
    let drawing = Drawing {
        colour: false,
        diff_max_bytes: HOST_DIFF_BYTES,
    };
    let message = approve::describe_for_form(request, drawing);
    let for_session = match request.suggestions.first() {
        Some(rule) => format!("Allow for this session ({})", visible::line(rule)),
        None => "Allow for this session".to_owned(),
    };
    let mut choices = vec![
        ("allow_once", "Allow once".to_owned()),
        ("allow_session", for_session),
    ];
    if let Some(always) = &request.always {
        let rule = visible::line(&always.rule);
        let project = visible::line(&always.project);
        choices.push((
            "allow_always",
            format!("Always allow ({rule}) in {project}"),
        ));
        choices.push(("deny", "Deny".to_owned()));
        choices.push(("deny_always", format!("Always deny ({rule}) in {project}")));
    } else {
        choices.push(("deny", "Deny".to_owned()));
    }
    let decision = if titled {
        let one_of: Vec<Value> = choices
            .iter()
            .map(|(value, title)| json!({"const": value, "title": title}))
            .collect();
        json!({"type": "string", "title": "Decision", "oneOf": one_of})
    } else {
        let values: Vec<&str> = choices.iter().map(|(value, _)| *value).collect();
        let titles: Vec<&String> = choices.iter().map(|(_, title)| title).collect();
        json!({"type": "string", "title": "Decision", "enum": values, "enumNames": titles})
    };
    let schema = json!({
        "type": "object",
        "properties": {"decision": decision},
        "required": ["decision"],
    });
    let requested_schema: ElicitationSchema = serde_json::from_value(schema)
        .map_err(|error| format!("the approval form is invalid: {error}"))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    })
}

/// The approver's answer from the host's to the form: `accept` with a decision decides so;
/// anything else denies.
pub fn decided(result: &ElicitResult) -> ApprovalAnswer {
    let decision = match result.action {
        ElicitationAction::Accept => result
            .content
            .as_ref()
            .and_then(|content| content.get("decision"))
            .and_then(Value::as_str),
        // Declined, cancelled, or an action newer than this build knows: no.
        _ => None,
    };
    match decision {
        Some("allow_once") => ApprovalAnswer::new(ApprovalDecision::AllowOnce),
        Some("allow_session") => ApprovalAnswer::new(ApprovalDecision::AllowSession),
        Some("allow_always") => ApprovalAnswer::new(ApprovalDecision::AllowAlways),
        Some("deny_always") => ApprovalAnswer::new(ApprovalDecision::DenyAlways),
        _ => ApprovalAnswer {
            message: Some("denied by the person in the MCP host".to_owned()),
            ..ApprovalAnswer::new(ApprovalDecision::Deny)
        },
    }
}

/// The host's answer in a retried call's `inputResponses` (under [`ANSWER_KEY`]); a missing
/// or unreadable one denies.
pub fn decided_from_input(responses: Option<&InputResponses>) -> ApprovalAnswer {
    let result = responses
        .and_then(|responses| responses.get(ANSWER_KEY))
        .and_then(|answer| serde_json::from_value::<ElicitResult>(answer.clone()).ok());
    match result {
        Some(result) => decided(&result),
        None => ApprovalAnswer {
            message: Some(format!(
                "denied: the MCP host's retry carried no `{ANSWER_KEY}` answer"
            )),
            ..ApprovalAnswer::new(ApprovalDecision::Deny)
        },
    }
}

/// The key of the approval's elicitation in `inputRequests` and of its answer in
/// `inputResponses`.
pub const ANSWER_KEY: &str = "approval";

/// `bytes` random bytes from the kernel, as hex: a nonce no other process can guess.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    use std::io::Read;
    let mut random = vec![0; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    Ok(random.iter().map(|byte| format!("{byte:02x}")).collect())
}
