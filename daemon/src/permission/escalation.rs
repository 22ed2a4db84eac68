//! What a `run_command` call asks its sandbox to loosen (`escalate`), as the permission engine
//! judges it, and the ` with …` part of a rule or grant that covers such calls.
//!
//! A call's escalation counts only for what it loosens beyond the session's sandbox: network
//! asked where the network is already on, or a directory the command may already write, is
//! nothing, and a call that loosens nothing is judged as one without `escalate`. A rule without
//! ` with …` never covers an escalated call: `allow run_command(npm *)` lets `npm` run inside
//! the sandbox, `allow run_command(npm install *) with network` lets it reach the network too.

use std::path::{Path, PathBuf};

use super::shell_quoted;
pub(crate) use crate::sandbox::Loosening;

impl Loosening {
    pub(crate) fn is_empty(&self) -> bool {
        !self.network && !self.unsandboxed && self.writable.is_empty()
    }

    /// The canonical ` with …` text: `network`, `unsandboxed`, `writable=DIR` (quoted as a
    /// shell word when it needs it, so that a directory's name never reads as another item),
    /// joined by `, `.
    pub(crate) fn text(&self) -> String {
        let mut items = Vec::new();
        if self.unsandboxed {
            items.push("unsandboxed".to_owned());
        }
        if self.network {
            items.push("network".to_owned());
        }
        for dir in &self.writable {
            items.push(format!(
                "writable={}",
                shell_quoted(&crate::paths::exact_text(dir))
            ));
        }
        items.join(", ")
    }

    /// Parses the text after a rule's `) with `; `None` when it is not a list of the items
    /// [`Self::text`] writes (a `writable=` directory must be absolute, or start with `~/`).
    pub(crate) fn parse(text: &str, home: &Path) -> Option<Self> {
        let mut loosening = Loosening::default();
        for item in split_items(text)? {
            match item.as_str() {
                "network" => loosening.network = true,
                "unsandboxed" => loosening.unsandboxed = true,
                _ => {
                    let dir = item.strip_prefix("writable=")?;
                    // As the engine refuses in a call's `escalate`: a `)` could end a pattern.
                    if dir.contains(')') {
                        return None;
                    }
                    let dir = match dir.strip_prefix("~/") {
                        Some(in_home) => home.join(in_home),
                        None if dir.starts_with('/') => PathBuf::from(dir),
                        None => return None,
                    };
                    loosening
                        .writable
                        .push(crate::paths::normalize_lexically(&dir));
                }
            }
        }
        (!loosening.is_empty()).then_some(loosening)
    }

    /// Whether a rule's loosening allows all of `call`'s: no sandbox covers everything, and a
    /// directory is covered by one of the rule's that holds it.
    pub(crate) fn covers(&self, call: &Loosening) -> bool {
        if self.unsandboxed {
            return true;
        }
        !call.unsandboxed
            && (!call.network || self.network)
            && call
                .writable
                .iter()
                .all(|dir| self.writable.iter().any(|rule| dir.starts_with(rule)))
    }

    /// Whether a deny or ask rule's loosening is about any part of `call`'s.
    pub(crate) fn overlaps(&self, call: &Loosening) -> bool {
        self.unsandboxed && call.unsandboxed
            || self.network && call.network
            || call.writable.iter().any(|dir| {
                self.writable
                    .iter()
                    .any(|rule| dir.starts_with(rule) || rule.starts_with(dir))
            })
            // No sandbox at all loosens the network and every directory too.
            || call.unsandboxed && (self.network || !self.writable.is_empty())
    }
}

/// The items of a ` with …` list: split on commas outside single quotes, each trimmed and
/// unquoted as a shell word would be; `None` for an unclosed quote or an empty item.
fn split_items(text: &str) -> Option<Vec<String>> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => quoted = !quoted,
            '\\' if !quoted && chars.peek() == Some(&'\'') => {
                current.push('\'');
                chars.next();
            }
            ',' if !quoted => items.push(std::mem::take(&mut current)),
            c if !quoted && c.is_whitespace() => {}
            c => current.push(c),
        }
    }
    if quoted {
        return None;
    }
    items.push(current);
    items
        .into_iter()
        .map(|item| (!item.is_empty()).then_some(item))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Option<Loosening> {
        Loosening::parse(text, Path::new("/home/u"))
    }

    #[test]
    fn text_and_parse_are_one_grammar() {
        let loosening = Loosening {
            network: true,
            writable: vec![PathBuf::from("/tmp/a, network"), PathBuf::from("/srv/x")],
            unsandboxed: false,
        };
        let text = loosening.text();
        assert_eq!(text, "network, writable='/tmp/a, network', writable=/srv/x");
        assert_eq!(parse(&text), Some(loosening));
        assert_eq!(
            parse("writable=~/.cache/x").unwrap().writable,
            [PathBuf::from("/home/u/.cache/x")]
        );
        for refused in [
            "",
            "network,",
            "net",
            "writable=relative",
            "writable='/x",
            "writable=",
        ] {
            assert_eq!(parse(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn a_rule_covers_what_it_names_and_no_more() {
        let rule = parse("network, writable=/srv").unwrap();
        assert!(rule.covers(&parse("network").unwrap()));
        assert!(rule.covers(&parse("writable=/srv/a/b").unwrap()));
        assert!(!rule.covers(&parse("writable=/srvx").unwrap()));
        assert!(!rule.covers(&parse("unsandboxed").unwrap()));
        assert!(parse("unsandboxed").unwrap().covers(&rule));
        assert!(
            !parse("writable=/srv")
                .unwrap()
                .covers(&parse("network").unwrap())
        );
    }

    #[test]
    fn a_restrictive_rule_is_about_any_part() {
        let network = parse("network").unwrap();
        assert!(network.overlaps(&parse("network, writable=/x").unwrap()));
        assert!(network.overlaps(&parse("unsandboxed").unwrap()));
        assert!(!network.overlaps(&parse("writable=/x").unwrap()));
        assert!(
            parse("writable=/x/y")
                .unwrap()
                .overlaps(&parse("writable=/x").unwrap())
        );
        assert!(
            !parse("writable=/x/y")
                .unwrap()
                .overlaps(&parse("writable=/z").unwrap())
        );
    }
}
