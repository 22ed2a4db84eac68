//! A session as the call pipeline sees it: its Env, mode, rules, grants and tool list (read
//! afresh at each step, so an update reaches every call that has not passed that step), the
//! peers that can approve and hook its calls, and its event sink.

use std::path::Path;
use std::sync::{Arc, RwLock};

use toold_protocol::sync::RwLockUnpoisoned;
use toold_protocol::{Rules, SessionMode, ToolDefinition};

use crate::approval::Approver;
use crate::env::Env;
use crate::events::{EventListener, EventSink};
use crate::hooks::ClientHooks;
use crate::paths::ResolvedPath;
use crate::permission::facts::{AnalysedLine, with_facts_and_paths};
use crate::permission::{
    self, CallFacts, ConfigRules, Decision, HookVerdict, Judgment, Policy, RuleError, SessionFacts,
};
use crate::tools::ResolvedCall;
use crate::tools::registry::is_listed;

/// The most a session's grants may take (their JSON text as its saved record holds them): an
/// `allow_session` answer past it allows its call once and records no grant. With the store's
/// `MAX_REQUESTED_RECORD_BYTES` this keeps every record under its `MAX_RECORD_BYTES`.
pub(crate) const MAX_GRANT_BYTES: usize = 768 * 1024;

/// How many bytes a grant takes in a saved record: its JSON string on a line of its own.
pub(crate) fn grant_bytes(grant: &str) -> usize {
    serde_json::to_string(grant).map_or(usize::MAX, |json| json.len() + "    ,\n".len())
}

/// What a session's calls run under. Cloned per step: cheap, the large parts are shared.
#[derive(Clone)]
pub struct SessionState {
    pub env: Arc<Env>,
    pub mode: SessionMode,
    /// The session's own rules; `policy` holds them compiled together with the config's.
    pub rules: Rules,
    pub policy: Arc<Policy>,
    /// Rule strings recorded by `allow_session` answers.
    pub grants: Vec<String>,
    /// The tools the session's model may see (`None`: all); system tools are always visible.
    pub allowed_tools: Option<Vec<String>>,
}

impl SessionState {
    /// A state whose policy is `config_rules` and `rules` compiled for the Env's cwd.
    pub fn new(
        env: Env,
        mode: SessionMode,
        rules: Rules,
        config_rules: &ConfigRules,
        home: &Path,
    ) -> Result<Self, RuleError> {
        let policy = Policy::for_session(
            config_rules,
            &rules,
            &env.cwd,
            env.roots.first().map(|r| r.as_path()),
            home,
        )?;
        let mut env = env;
        env.sandbox.denied_reads = Arc::new(policy.denied_reads());
        Ok(Self {
            env: Arc::new(env),
            mode,
            rules,
            policy: Arc::new(policy),
            grants: Vec::new(),
            allowed_tools: None,
        })
    }

    /// Compiles the policy again from `config_rules` (a reload's) and the session's own rules;
    /// on an error the policy is left as it was.
    pub(crate) fn recompile(
        &mut self,
        config_rules: &ConfigRules,
        home: &Path,
    ) -> Result<(), RuleError> {
        let project = self.env.roots.first().map(|root| root.as_path());
        let policy = Policy::for_session(config_rules, &self.rules, &self.env.cwd, project, home)?;
        // What the session's commands cannot read follows its read deny rules.
        Arc::make_mut(&mut self.env).sandbox.denied_reads = Arc::new(policy.denied_reads());
        self.policy = Arc::new(policy);
        Ok(())
    }

    /// The permission engine's decision on a resolved call under this state (paths resolved
    /// first; `analysed` is the call's `run_command` line analysed, when it has one).
    pub(crate) fn decide(
        &self,
        resolved: &ResolvedCall,
        analysed: Option<&AnalysedLine>,
        hook: HookVerdict,
    ) -> Decision {
        self.decide_judging(resolved, analysed, hook).0.decision
    }

    /// [`decide`](Self::decide), with the path arguments as they were judged (for the tool to
    /// act on) and the step and rule that decided.
    pub(crate) fn decide_judging(
        &self,
        resolved: &ResolvedCall,
        analysed: Option<&AnalysedLine>,
        hook: HookVerdict,
    ) -> (Judgment, Vec<ResolvedPath>) {
        let ((judgment, ()), paths) = self.judge_and_inspect(resolved, analysed, hook, |_, _| ());
        (judgment, paths)
    }

    /// [`decide_judging`](Self::decide_judging), also handing the facts the decision rests on
    /// to `inspect` (`permissions/explain`): one gathering of the facts serves both, so what is
    /// explained is what was decided.
    pub(crate) fn judge_and_inspect<T>(
        &self,
        resolved: &ResolvedCall,
        analysed: Option<&AnalysedLine>,
        hook: HookVerdict,
        inspect: impl FnOnce(&CallFacts<'_>, &Judgment) -> T,
    ) -> ((Judgment, T), Vec<ResolvedPath>) {
        let session = SessionFacts {
            mode: self.mode,
            policy: &self.policy,
            grants: &self.grants,
            confined: self.env.sandbox.confines_commands(&self.env.roots),
        };
        with_facts_and_paths(&self.env, resolved, analysed, hook, |facts| {
            let judgment = permission::evaluate(facts, &session);
            let inspected = inspect(facts, &judgment);
            (judgment, inspected)
        })
    }

    /// Whether the session's model may see (and so call) a tool, in the current mode.
    pub(crate) fn visible(&self, definition: &ToolDefinition) -> bool {
        self.hidden_by(definition).is_none()
    }

    /// Why the session's model may not see a tool; `None` when it may.
    pub(crate) fn hidden_by(&self, definition: &ToolDefinition) -> Option<Hidden> {
        if definition.system {
            return None;
        }
        if self.mode == SessionMode::Plan && definition.safety != toold_protocol::Safety::ReadOnly {
            return Some(Hidden::PlanMode);
        }
        let listed = self
            .allowed_tools
            .as_deref()
            .is_none_or(|allowed| is_listed(definition, allowed));
        (!listed).then_some(Hidden::ToolList)
    }
}

/// Why a tool is hidden from a session: what `permissions/explain` and the audit log name as
/// the step that made a call of it `tool_not_allowed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hidden {
    /// Plan mode shows read-only tools alone.
    PlanMode,
    /// The session's `allowed_tools` leave it out.
    ToolList,
}

impl Hidden {
    /// The step's name (`plan_mode`, `tool_list`).
    pub(crate) fn step(self) -> &'static str {
        match self {
            Hidden::PlanMode => permission::Step::PlanMode.as_str(),
            Hidden::ToolList => "tool_list",
        }
    }

    /// Who decided, as the audit log says it: the mode, or the session's tool list.
    pub(crate) fn decided_by(self) -> &'static str {
        match self {
            Hidden::PlanMode => "mode",
            Hidden::ToolList => "system",
        }
    }
}

/// Who, among the session's attached connections, can approve and hook its calls.
#[derive(Clone, Default)]
pub struct SessionPeers {
    pub approver: Option<Arc<dyn Approver>>,
    pub hooks: Vec<Arc<dyn ClientHooks>>,
}

/// A session as the pipeline sees it: its id, its state (read afresh at each step), the peers
/// that approve and hook its calls, and the sink its events go through. The session itself, as
/// the daemon keeps it, is `session::LiveSession`, which holds one.
pub struct SessionView {
    id: String,
    /// Shared with the calls that took it: a snapshot costs a reference count, and a change
    /// copies the state only while a snapshot of it is still held.
    state: RwLock<Arc<SessionState>>,
    peers: RwLock<SessionPeers>,
    events: EventSink,
    /// Called after each grant recorded ([`Self::on_grant`]).
    grant_recorded: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl SessionView {
    /// A session whose events are numbered after `last_seq` (0 for a new session; a restored
    /// one continues where it stopped).
    pub fn new(
        id: impl Into<String>,
        state: SessionState,
        listener: Arc<dyn EventListener>,
        last_seq: u64,
    ) -> Self {
        let id = id.into();
        Self {
            events: EventSink::new(id.clone(), last_seq, listener),
            id,
            state: RwLock::new(Arc::new(state)),
            peers: RwLock::new(SessionPeers::default()),
            grant_recorded: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub fn events(&self) -> &EventSink {
        &self.events
    }

    /// The state as it is now: a snapshot that later changes leave as it is.
    pub fn state(&self) -> Arc<SessionState> {
        Arc::clone(&self.state.read_unpoisoned())
    }

    /// Changes the state; the next step of every call sees the change.
    pub fn update<T>(&self, change: impl FnOnce(&mut SessionState) -> T) -> T {
        change(Arc::make_mut(&mut self.state.write_unpoisoned()))
    }

    /// Records an `allow_session` grant (once); `false` when the session's grants have no room
    /// for it ([`MAX_GRANT_BYTES`]), so that its record can always be saved and loaded.
    pub(crate) fn add_grant(&self, grant: String) -> bool {
        let mut state = self.state.write_unpoisoned();
        if state.grants.contains(&grant) {
            return true;
        }
        if !Self::has_room(&state.grants, &grant) {
            return false;
        }
        Arc::make_mut(&mut state).grants.push(grant);
        drop(state);
        if let Some(grant_recorded) = self.grant_recorded.get() {
            grant_recorded();
        }
        true
    }

    /// Has `hook` called after each grant recorded from now on (once set, for good): a grant
    /// must outlive the daemon, so whoever keeps sessions saves the session then.
    pub(crate) fn on_grant(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.grant_recorded.set(Box::new(hook));
    }

    /// Whether `grants` have room for `grant` ([`MAX_GRANT_BYTES`]).
    fn has_room(grants: &[String], grant: &str) -> bool {
        let taken: usize = grants.iter().map(|grant| grant_bytes(grant)).sum();
        taken.saturating_add(grant_bytes(grant)) <= MAX_GRANT_BYTES
    }

    pub fn peers(&self) -> SessionPeers {
        self.peers.read_unpoisoned().clone()
    }

    pub fn set_peers(&self, peers: SessionPeers) {
        *self.peers.write_unpoisoned() = peers;
    }
}
