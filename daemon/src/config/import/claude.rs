//! Claude Code's `settings.json` as toold config: `permissions.allow`, `.ask` and `.deny` are
//! rules toold reads as written (its rule language takes Claude Code's forms), except a path
//! pattern anchored at the settings file (`Edit(/src/**)`), which is made absolute so that it
//! means the same in toold's config. What has no config-wide equivalent is dropped, with why.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Dropped, Import, ImportedRule, Unmapped, shown_path};
use crate::permission::{Rule, RuleList};
use crate::tools::{JudgedArguments, judged_arguments};

/// Claude Code's tools whose rules take a path pattern (toold's own are known by what they
/// judge).
const PATH_TOOLS: [&str; 7] = ["Read", "Edit", "MultiEdit", "Write", "Glob", "Grep", "LS"];

/// The rules and settings of one `settings.json` (`file` absolute, as read; `text` its
/// contents). A file that is not a JSON object is an error.
pub fn settings(file: &Path, text: &str, home: &Path) -> Result<Import, String> {
    let shown = shown_path(file, home);
    let root: Value = serde_json::from_str(text)
        .map_err(|error| format!("{shown} is not valid JSON: {error}"))?;
    let Value::Object(root) = root else {
        return Err(format!("{shown} does not hold a JSON object"));
    };
    let mut import = Import::default();
    let anchor = anchor_of(file);
    let others: Vec<String> = root
        .keys()
        .filter(|key| *key != "permissions")
        .cloned()
        .collect();
    if !others.is_empty() {
        import.unmapped.push(Unmapped {
            source: shown.clone(),
            keys: others,
            why: "not permission settings".to_owned(),
        });
    }
    let Some(permissions) = root.get("permissions") else {
        return Ok(import);
    };
    let Value::Object(permissions) = permissions else {
        import.dropped.push(Dropped {
            source: shown,
            entry: "permissions".to_owned(),
            why: "is not an object".to_owned(),
        });
        return Ok(import);
    };
    for (key, value) in permissions {
        let list = match key.as_str() {
            "allow" => RuleList::Allow,
            "ask" => RuleList::Ask,
            "deny" => RuleList::Deny,
            _ => {
                import.dropped.push(Dropped {
                    source: shown.clone(),
                    entry: format!("permissions.{key} = {value}"),
                    why: unmapped_permission_key(key),
                });
                continue;
            }
        };
        let Value::Array(items) = value else {
            import.dropped.push(Dropped {
                source: shown.clone(),
                entry: format!("permissions.{key}"),
                why: "is not an array of rule strings".to_owned(),
            });
            continue;
        };
        for item in items {
            let Value::String(written) = item else {
                import.dropped.push(Dropped {
                    source: shown.clone(),
                    entry: format!("permissions.{key}: {item}"),
                    why: "is not a string".to_owned(),
                });
                continue;
            };
            let rule = anchored(written, &anchor).unwrap_or_else(|| written.trim().to_owned());
            // No anchor: a pattern still relative to the settings file (one this module did
            // not make absolute) is refused, never written where it would mean another place.
            match Rule::parse_all(&rule, Path::new("/"), home, None) {
                Ok(_) => import.rules.push(ImportedRule {
                    list,
                    rule,
                    origin: shown.clone(),
                }),
                Err(error) => import.dropped.push(Dropped {
                    source: shown.clone(),
                    entry: format!("permissions.{key}: {written:?}"),
                    why: error.to_string(),
                }),
            }
        }
    }
    Ok(import)
}

/// Why a key of `permissions` other than the three lists is not imported.
fn unmapped_permission_key(key: &str) -> String {
    match key {
        "defaultMode" => "toold has no config-wide mode: a session's mode is chosen when it is \
                          created (e.g. `toold mcp serve --mode accept_edits`, `toold call --mode \
                          plan`)"
            .to_owned(),
        "additionalDirectories" => "toold has no config-wide extra roots: a session's roots are \
                                    chosen when it is created (session/create's `roots`)"
            .to_owned(),
        "disableBypassPermissionsMode" => {
            "toold's `allow_bypass` (default false) decides whether sessions may use bypass mode"
                .to_owned()
        }
        _ => "no toold equivalent".to_owned(),
    }
}

/// The directory a `/…` pattern of `file` starts from: the one holding `.claude` for a file
/// inside a `.claude` directory (a project's settings), else the file's own directory.
pub(crate) fn anchor_of(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("/"));
    match (dir.file_name(), dir.parent()) {
        (Some(name), Some(project)) if name == ".claude" => project.to_owned(),
        _ => dir.to_owned(),
    }
}

/// `rule` with its path pattern made absolute (`//ANCHOR/…`) when it is anchored at the
/// settings file by one leading `/`; `None` when the rule has no such pattern.
pub(crate) fn anchored(rule: &str, anchor: &Path) -> Option<String> {
    let rule = rule.trim();
    let open = rule.find('(')?;
    let tool = rule[..open].trim();
    let pattern = rule[open + 1..].strip_suffix(')')?.trim();
    let takes_a_path = PATH_TOOLS.contains(&tool)
        || matches!(judged_arguments(tool), JudgedArguments::Path { .. });
    if !takes_a_path || !pattern.starts_with('/') || pattern.starts_with("//") {
        return None;
    }
    let anchor = globset::escape(&anchor.to_string_lossy());
    let anchor = anchor.trim_end_matches('/');
    Some(format!("{tool}(/{anchor}{pattern})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn anchored_patterns_become_absolute_at_the_project() {
        let project = Path::new("/home/u/app");
        assert_eq!(
            anchor_of(Path::new("/home/u/app/.claude/settings.json")),
            project
        );
        assert_eq!(
            anchor_of(Path::new("/home/u/.claude/settings.json")),
            Path::new("/home/u")
        );
        assert_eq!(
            anchor_of(Path::new("/etc/claude/x.json")),
            Path::new("/etc/claude")
        );
        for (rule, expected) in [
            ("Edit(/src/**)", Some("Edit(//home/u/app/src/**)")),
            ("Read( /docs/*.md )", Some("Read(//home/u/app/docs/*.md)")),
            ("read_file(/x)", Some("read_file(//home/u/app/x)")),
            ("Edit(//etc/**)", None),
            ("Edit(~/x)", None),
            ("Edit(./x)", None),
            ("Edit(src/**)", None),
            ("Bash(/bin/ls:*)", None),
            ("Read", None),
        ] {
            assert_eq!(anchored(rule, project).as_deref(), expected, "{rule}");
        }
        assert_eq!(
            anchored("Edit(/a)", Path::new("/p[1]")).as_deref(),
            Some("Edit(//p[[]1[]]/a)")
        );
    }

    #[test]
    fn lists_are_read_and_the_rest_named() {
        let file = Path::new("/home/u/app/.claude/settings.local.json");
        let text = r#"{
            "model": "x", "env": {"A": "1"},
            "permissions": {
                "allow": ["Bash(npm run test:*)", "Edit(/src/**)", 3, "WebSearch"],
                "deny": ["Read(./.env)", "Bash(git:* push)"],
                "defaultMode": "acceptEdits",
                "additionalDirectories": ["../lib"]
            }
        }"#;
        let import = settings(file, text, Path::new("/home/u")).unwrap();
        let rules: Vec<_> = import
            .rules
            .iter()
            .map(|rule| (rule.list, rule.rule.as_str(), rule.origin.as_str()))
            .collect();
        let origin = "~/app/.claude/settings.local.json";
        assert_eq!(
            rules,
            [
                (RuleList::Allow, "Bash(npm run test:*)", origin),
                (RuleList::Allow, "Edit(//home/u/app/src/**)", origin),
                (RuleList::Deny, "Read(./.env)", origin),
            ]
        );
        let dropped: Vec<_> = import.dropped.iter().map(|d| d.entry.as_str()).collect();
        assert_eq!(
            dropped,
            [
                "permissions.allow: 3",
                "permissions.allow: \"WebSearch\"",
                "permissions.deny: \"Bash(git:* push)\"",
                "permissions.defaultMode = \"acceptEdits\"",
                "permissions.additionalDirectories = [\"../lib\"]",
            ]
        );
        assert!(
            import.dropped[1].why.contains("web"),
            "{:?}",
            import.dropped[1]
        );
        assert!(import.dropped[3].why.contains("--mode"));
        assert_eq!(import.unmapped[0].keys, ["model", "env"]);
        assert!(settings(file, "[1]", Path::new("/")).is_err());
        assert!(settings(file, "{", Path::new("/")).is_err());
    }
}
