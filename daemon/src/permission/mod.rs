//! The permission engine (docs/protocol.md section 7): rules, modes and grants in, one decision
//! out.
//!
//! Pure: no IO and no clock. The caller gathers the facts first (paths resolved on disk by
//! `paths`, the command line analysed by `shell`), so that every decision is a table lookup
//! that tests can drive with plain values.
//!
//! Each concern has its file: a rule's syntax (`rules`, its patterns in `patterns`, its errors
//! in `rule_error`), the rules in force (`policy`), what a decision is made from (`inputs`) and
//! what it answers (`judgment`), the order of the steps (`decision_order`), whether a rule matches a
//! call (`matching`), and the texts grants record (`grants`).

mod claude;
mod decision_order;
pub(crate) mod escalation;
pub mod facts;
mod grants;
mod inputs;
mod judgment;
mod known_safe;
pub(crate) mod lint;
mod matching;
mod patterns;
mod policy;
mod prefix_grant;
mod rule_error;
mod rules;
mod shell_word;

pub use self::decision_order::{denied, evaluate};
pub use self::grants::grant_shown;
pub(crate) use self::grants::{always_rule, canonical_form, session_grant};
pub use self::inputs::{CallFacts, CommandFacts, HookVerdict, SessionFacts};
pub use self::judgment::{DecidingRule, Decision, Judgment, Step};
pub(crate) use self::matching::command_rules;
pub use self::policy::{ConfigRules, Policy, ProjectRules, SandboxedCommands};
pub(crate) use self::rule_error::RuleError;
pub use self::rules::{Rule, RuleList, RuleOrigin, home_dir, shown_read_as};
pub(crate) use self::shell_word::shell_quoted;

#[cfg(test)]
mod tests;
