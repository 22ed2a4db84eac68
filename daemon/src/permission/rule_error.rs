//! Why a rule's text is refused: the one error every part of reading a rule (its tool, its
//! patterns, its ` with …` part, Claude Code's forms) reports.

/// Why a rule string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    #[error("rule {0:?} is empty")]
    Empty(String),
    #[error("rule {0:?} has no tool name before its '('")]
    NoTool(String),
    #[error("rule {0:?} does not end with ')'")]
    Unclosed(String),
    #[error("rule {rule:?} has an invalid glob: {reason}")]
    BadGlob { rule: String, reason: String },
    #[error(
        "rule {0:?} has an unknown ` with …` part: a run_command rule may end with ` with` and \
         a comma-separated list of network, unsandboxed and writable=DIR (absolute or ~/)"
    )]
    BadEscalation(String),
    #[error("rule {rule:?} cannot be honoured: {reason}")]
    Unsupported { rule: String, reason: String },
    #[error(
        "rule {0:?} has a path starting with one '/', which is relative to the file the rule is \
         written in, and this rule is written in none: write //PATH for an absolute path, ~/PATH \
         under your home, or ./PATH under the session's directory"
    )]
    NoAnchor(String),
}
