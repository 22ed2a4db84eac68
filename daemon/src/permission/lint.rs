//! Rules that parse but can never match what they name: a tool name no tool can have, or one a
//! letter or two (or only its case) away from a tool that exists, an argument the tool has
//! not (or not as a string), a command pattern no command's words can spell, a path no
//! normalized path can have (`a/../b`, `./x/./y`, `a//b`), a path no file can have (`secrets/`, `/etc/hostname`, which is relative: an
//! absolute pattern starts with `//`), or a directory given to a tool that acts on files only
//! (`read_file(secrets)` covers no file inside). A deny rule like these protects nothing while
//! looking as if it did, so session rules are refused with the reason and the config's are
//! warned about (`toold check-config`).

use std::path::{Path, PathBuf};

use serde_json::Value;
use toold_protocol::ToolDefinition;

use super::{Rule, Specifier};
use crate::tools::registry::is_valid_tool_name;

/// Why the rule `text` (already parsed) can never match, if it cannot. `known_tools` are the
/// tools registered now; a rule may name another tool (one a client or an MCP server may
/// register later, denied ahead of time), unless no tool can have that name or it is a near
/// miss of a known one. `cwd` and `home`, when known, let a pattern be checked on disk.
pub fn never_matches(
    text: &str,
    tools: &[ToolDefinition],
    cwd: Option<&Path>,
    home: &Path,
) -> Option<String> {
    let rule = Rule::parse(text, cwd.unwrap_or(Path::new("/")), home).ok()?;
    if rule.is_pattern() {
        return pattern_never_matches(&rule, tools);
    }
    if !is_valid_tool_name(&rule.tool) {
        return Some(format!(
            "no tool can be named {:?}: tool names are 1 to 64 ASCII letters, digits, '_', '.' \
             or '-'",
            rule.tool
        ));
    }
    let Some(definition) = tools.iter().find(|tool| tool.name == rule.tool) else {
        return near_miss(&rule.tool, tools).map(|near| {
            format!(
                "no tool is named {:?} (names are exact); did you mean {near:?}?",
                rule.tool
            )
        });
    };
    match &rule.specifier {
        Specifier::Argument { name, .. } if !name.is_empty() => {
            return no_such_string_argument(definition, name);
        }
        Specifier::Command(_) => {
            let pattern = inner_text(&rule)?;
            let pattern = pattern.strip_prefix("command=").unwrap_or(pattern);
            if pattern.is_empty() {
                return Some("an empty command pattern matches no command".to_owned());
            }
            if pattern.trim() != pattern {
                return Some(format!(
                    "{pattern:?} starts or ends with blanks, which no command does: a command \
                     is matched as its words joined by single spaces"
                ));
            }
            return None;
        }
        _ => {}
    }
    if !rule.judged.takes_a_path() {
        return None;
    }
    let pattern = path_pattern(&rule)?;
    if let Some(reason) = not_normalized(pattern) {
        return Some(reason);
    }
    if pattern.ends_with('/') {
        return Some(format!(
            "paths never end in '/', so {pattern:?} matches nothing; write \"{pattern}**\" for \
             everything inside"
        ));
    }
    if pattern.starts_with('/') && !pattern.starts_with("//") {
        return Some(format!(
            "a pattern starting with one '/' is relative to the session's directory, so \
             {pattern:?} matches nothing; write \"/{pattern}\" for the absolute path"
        ));
    }
    let literal = !pattern.contains(['*', '?', '[', '{']);
    if literal
        && rule.judged.one_file()
        && let Some(directory) = on_disk(pattern, cwd, home).filter(|path| path.is_dir())
    {
        return Some(format!(
            "{} is a directory and {} acts on files only, so {pattern:?} covers no file in \
             it; write \"{}/**\" for the files inside",
            directory.display(),
            rule.tool,
            pattern.trim_end_matches('/')
        ));
    }
    None
}

/// The text between a rule's parentheses, as written.
fn inner_text(rule: &Rule) -> Option<&str> {
    rule.text.split_once('(')?.1.strip_suffix(')')
}

/// The path pattern of a file tool's rule, as written (`path=` dropped).
fn path_pattern(rule: &Rule) -> Option<&str> {
    let inner = inner_text(rule)?.trim();
    Some(inner.strip_prefix("path=").unwrap_or(inner).trim())
}

/// `tool(name=glob)` matches a string argument `name`: one the tool's schema does not have as
/// a string is never there to match.
fn no_such_string_argument(definition: &ToolDefinition, name: &str) -> Option<String> {
    let properties = definition.input_schema.get("properties")?.as_object()?;
    let is_string = |schema: &Value| match schema.get("type") {
        Some(Value::String(kind)) => kind == "string",
        Some(Value::Array(kinds)) => kinds.iter().any(|kind| kind == "string"),
        // No type: any value, strings included.
        None => true,
        Some(_) => false,
    };
    if properties.get(name).is_some_and(is_string) {
        return None;
    }
    let strings: Vec<&str> = properties
        .iter()
        .filter(|(_, schema)| is_string(schema))
        .map(|(name, _)| name.as_str())
        .collect();
    Some(format!(
        "{} has no string argument {name:?}, so the rule matches no call; its string \
         arguments are: {}",
        definition.name,
        strings.join(", ")
    ))
}

/// Paths are matched normalized (made absolute, `.` and `..` resolved, no `//`): a pattern
/// with such a component matches none.
fn not_normalized(pattern: &str) -> Option<String> {
    let body = pattern
        .strip_prefix("//")
        .or_else(|| pattern.strip_prefix("~/"))
        .or_else(|| pattern.strip_prefix("./"))
        .unwrap_or(pattern);
    let odd = body.contains("//")
        || body
            .split('/')
            .any(|component| component == "." || component == "..");
    odd.then(|| {
        format!(
            "paths are matched normalized (no '.', '..' or '//' in them), so {pattern:?} \
             matches nothing; write the path as it is once normalized"
        )
    })
}

/// Where a literal pattern points when it names one place: `//x`, `~/x`, or `x/y` under the
/// cwd. A bare name (`secrets`) matches that name in any directory; it is looked for in the
/// cwd, where it most often means something.
fn on_disk(pattern: &str, cwd: Option<&Path>, home: &Path) -> Option<PathBuf> {
    if let Some(absolute) = pattern.strip_prefix("//") {
        return Some(PathBuf::from(format!("/{absolute}")));
    }
    if let Some(in_home) = pattern.strip_prefix("~/") {
        return Some(home.join(in_home));
    }
    Some(cwd?.join(pattern.strip_prefix("./").unwrap_or(pattern)))
}

/// A tool pattern (`mcp__fs__*`) that no tool name can match (a character no name has), or
/// one with a specifier that a known tool it names would need judged as paths or a command
/// line: the pattern reads arguments as strings and so never covers that tool.
fn pattern_never_matches(rule: &Rule, tools: &[ToolDefinition]) -> Option<String> {
    let literal = rule.tool.replace('*', "");
    if !literal.is_empty() && !is_valid_tool_name(&literal) {
        return Some(format!(
            "no tool name can match {:?}: tool names are 1 to 64 ASCII letters, digits, '_', \
             '.' or '-' (and `*` matches any run of them)",
            rule.tool
        ));
    }
    if matches!(rule.specifier, Specifier::Any) {
        return None;
    }
    let judged_elsewise = tools.iter().find(|tool| {
        rule.tool_pattern
            .as_ref()
            .is_some_and(|pattern| pattern.matches(&tool.name))
            && !rule.covers(&tool.name)
    })?;
    Some(format!(
        "it never covers {}: a pattern's argument is matched as a string, and {}'s arguments \
         are judged as a path or a command line; write a rule for {} itself",
        judged_elsewise.name, judged_elsewise.name, judged_elsewise.name
    ))
}

/// For the config, whose rules may name tools that clients register later: a note when `text`
/// names none of `tools` (a pattern may cover tools that register later: no note).
pub fn names_an_unknown_tool(text: &str, tools: &[ToolDefinition], home: &Path) -> Option<String> {
    let rule = Rule::parse(text, Path::new("/"), home).ok()?;
    if rule.is_pattern() {
        return None;
    }
    (!tools.iter().any(|tool| tool.name == rule.tool)).then(|| {
        format!(
            "no builtin tool is named {:?}; the rule covers only a tool a client or an MCP \
             server registers under that exact name",
            rule.tool
        )
    })
}

/// A known tool `tool` is most likely a misspelling of: the same letters in another case, or
/// at most two edits away.
fn near_miss<'a>(tool: &str, tools: &'a [ToolDefinition]) -> Option<&'a str> {
    let lower = tool.to_ascii_lowercase();
    tools
        .iter()
        .map(|known| known.name.as_str())
        .find(|known| edit_distance(&known.to_ascii_lowercase(), &lower) <= 2)
}

/// Levenshtein distance, for "did you mean" (also on the config's key names).
pub(crate) fn edit_distance(left: &str, right: &str) -> usize {
    let right: Vec<char> = right.chars().collect();
    let mut previous: Vec<usize> = (0..=right.len()).collect();
    for (row, left_char) in left.chars().enumerate() {
        let mut current = vec![row + 1];
        for (column, right_char) in right.iter().enumerate() {
            let substitution = previous[column] + usize::from(left_char != *right_char);
            current.push(
                substitution
                    .min(previous[column + 1] + 1)
                    .min(current[column] + 1),
            );
        }
        previous = current;
    }
    previous[right.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtins() -> Vec<ToolDefinition> {
        crate::tools::builtins()
            .iter()
            .map(|tool| tool.definition())
            .collect()
    }

    #[test]
    fn rules_that_can_never_match_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(cwd.join("secrets/deep")).unwrap();
        std::fs::write(cwd.join("secrets/key"), "k").unwrap();
        let home = cwd.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        let tools = builtins();
        let judged = |text: &str| never_matches(text, &tools, Some(&cwd), &home);
        for (text, wanted) in [
            ("READ_FILE(secrets/**)", "did you mean \"read_file\""),
            ("Run_Command(rm *)", "did you mean \"run_command\""),
            ("raed_file", "did you mean \"read_file\""),
            ("run command(ls)", "no tool can be named"),
            ("run\u{200b}_command(ls)", "no tool can be named"),
            ("read_file(secrets/)", "paths never end in '/'"),
            ("read_file(path=secrets/deep/)", "paths never end in '/'"),
            ("read_file(/etc/hostname)", "write \"//etc/hostname\""),
            ("read_file(secrets)", "write \"secrets/**\""),
            ("edit_file(./secrets/deep)", "acts on files only"),
            ("write_file(~/.ssh)", "acts on files only"),
            ("read_file(//tmp)", "acts on files only"),
            (
                "read_file(file_path=secrets/**)",
                "no string argument \"file_path\"",
            ),
            ("read_file(offset=1)", "no string argument \"offset\""),
            ("run_command(cmd=cat *)", "no string argument \"cmd\""),
            ("run_command(command=)", "an empty command pattern"),
            ("run_command( cat *)", "starts or ends with blanks"),
            ("read_file(secrets/../secrets/key)", "matched normalized"),
            ("read_file(./secrets/./key)", "matched normalized"),
            ("read_file(secrets//key)", "matched normalized"),
            ("read_file(../work/secrets/**)", "matched normalized"),
            ("read_file(//tmp/a/../b)", "matched normalized"),
        ] {
            let reason = judged(text).unwrap_or_else(|| panic!("{text} was let through"));
            assert!(reason.contains(wanted), "{text}: {reason}");
        }
        for text in [
            "read_file(secrets/**)",
            "read_file(secrets/key)",
            "read_file(//etc/hostname)",
            "read_file(.env)",
            "search_code(secrets)",
            "find_files(//tmp)",
            "read_file(secrets/*)",
            "run_command(rm *)",
            "write_file",
            "read_file(~/.ssh/**)",
            // A tool registered later may be denied ahead of time.
            "control_plane",
            "deploy_to_production(*)",
            "run_command(command=cat *)",
            "search_code(pattern=*password*)",
            "read_file(./secrets/key)",
        ] {
            assert_eq!(judged(text), None, "{text}");
        }
        // Without a cwd nothing is looked for on disk.
        assert_eq!(
            never_matches("read_file(secrets)", &tools, None, &home),
            None
        );
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("read_file", "raed_file"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
