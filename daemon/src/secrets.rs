//! The secrets the config holds or names (an MCP server's bearer token and the variable that
//! holds it, its headers' values, the values of its `env` whose names say they are secret, the
//! password and query values of its URL): kept out of the environment of every process the
//! daemon starts, and replaced by [`REDACTED`] wherever the daemon quotes what an MCP server
//! said (its results, its errors, its stderr and its log file, `mcp/status`, the daemon's log).
//!
//! Process-wide, as the environment it filters is: the MCP servers' set replaces it whenever
//! the config is read ([`configure`]), and every reader takes the current one.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, RwLock};

use aho_corasick::AhoCorasick;
use toold_protocol::sync::RwLockUnpoisoned;

/// What stands where a secret was.
pub(crate) const REDACTED: &str = "[redacted]";

/// Shorter values are never taken for secrets: a one-to-three-character value (`1`, `on`,
/// `dev`) is a setting, and redacting it would garble every text it occurs in.
const MIN_SECRET_BYTES: usize = 4;

/// The words of a variable's or a header's name (split at `_` and `-`, any case) that say its
/// value is a secret: `GITHUB_PERSONAL_ACCESS_TOKEN`, `OPENAI_API_KEY`, `DB_PASSWORD`,
/// `X-Api-Key`. Whole words, so that `PATH` is not `PAT` and `KEYBOARD` not `KEY`.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "KEY",
    "APIKEY",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "PAT",
    "PRIVATE",
    "SIGNATURE",
];

/// Whether a variable or header called `name` holds a secret, by the words of its name.
pub(crate) fn names_a_secret(name: &str) -> bool {
    name.split(['_', '-']).any(|word| {
        SECRET_WORDS
            .iter()
            .any(|secret| word.eq_ignore_ascii_case(secret))
    })
}

/// One set of secrets: the variables withheld and the values redacted.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    /// Names of the daemon's variables that no process it starts inherits.
    withheld_variables: Vec<String>,
    /// Every value redacted, longest first (so that one secret inside another is not left
    /// half shown).
    values: Vec<String>,
    matcher: Option<AhoCorasick>,
}

impl Secrets {
    /// The secrets `values` (those of [`MIN_SECRET_BYTES`] or more) and the variables
    /// `withheld_variables`, whose current values in the daemon's environment are secrets too.
    pub(crate) fn new(withheld_variables: Vec<String>, values: Vec<String>) -> Self {
        let mut all: Vec<String> = values
            .into_iter()
            .chain(
                withheld_variables
                    .iter()
                    .filter_map(|name| std::env::var(name).ok()),
            )
            .filter(|value| value.len() >= MIN_SECRET_BYTES)
            .collect();
        all.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        all.dedup();
        let matcher = (!all.is_empty())
            .then(|| {
                aho_corasick::AhoCorasick::builder()
                    .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                    .build(&all)
                    .ok()
            })
            .flatten();
        Self {
            withheld_variables,
            values: all,
            matcher,
        }
    }

    /// `text` with every secret replaced by [`REDACTED`]; borrowed when it holds none.
    pub(crate) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.matcher {
            Some(matcher) if matcher.is_match(text) => {
                Cow::Owned(matcher.replace_all(text, &vec![REDACTED; self.values.len()]))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// Whether a process the daemon starts must not inherit its variable `name=value`: one
    /// the config names (`bearer_token_env`), or one that holds a secret under another name.
    pub(crate) fn withhold(&self, name: &OsStr, value: &OsStr) -> bool {
        self.withheld_variables
            .iter()
            .any(|withheld| withheld.as_bytes() == name.as_bytes())
            || self
                .values
                .iter()
                .any(|secret| secret.as_bytes() == value.as_bytes())
    }
}

static CONFIGURED: RwLock<Option<Arc<Secrets>>> = RwLock::new(None);

/// Makes `secrets` the daemon's secrets, replacing those of the config read before.
pub(crate) fn configure(secrets: Secrets) {
    *CONFIGURED.write_unpoisoned() = Some(Arc::new(secrets));
}

/// The daemon's current secrets (none before the config was read).
pub(crate) fn current() -> Arc<Secrets> {
    CONFIGURED.read_unpoisoned().clone().unwrap_or_default()
}

/// `text` with the daemon's current secrets redacted.
pub(crate) fn redact(text: &str) -> String {
    current().redact(text).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_read_by_whole_words() {
        for secret in [
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "OPENAI_API_KEY",
            "db_password",
            "X-Api-Key",
            "Authorization",
            "SLACK_BOT_TOKEN",
            "APIKEY",
        ] {
            assert!(names_a_secret(secret), "{secret}");
        }
        for setting in [
            "PATH",
            "KEYBOARD",
            "NODE_ENV",
            "ALLOWED_DIR",
            "DEBUG",
            "PWD",
        ] {
            assert!(!names_a_secret(setting), "{setting}");
        }
    }

    #[test]
    fn every_occurrence_is_redacted_and_short_values_are_not_secrets() {
        let secrets = Secrets::new(
            Vec::new(),
            vec!["sk-abc123".into(), "sk-abc123-long".into(), "on".into()],
        );
        assert_eq!(
            secrets.redact("key sk-abc123-long, then sk-abc123; on"),
            "key [redacted], then [redacted]; on"
        );
        assert!(matches!(secrets.redact("nothing here"), Cow::Borrowed(_)));
        assert!(secrets.withhold(OsStr::new("OTHER"), OsStr::new("sk-abc123")));
        assert!(!secrets.withhold(OsStr::new("OTHER"), OsStr::new("on")));
    }
}
