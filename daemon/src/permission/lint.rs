//! Rules that parse but can never match what they name: a tool name no tool can have, or one a
//! letter or two (or only its case) away from a tool that exists, an argument the tool has
//! not (or not as a string), a command pattern no command's words can spell, a path no
//! normalized path can have (`a/../b`, `./x/./y`, `a//b`), or an MCP server's tools where no
//! such server is configured. A deny rule like these protects nothing while looking as if it
//! did, so session rules are refused with the reason and the config's are warned about
//! (`toold check-config`), but for an unknown server's, which the config refuses too.

use std::path::Path;

use serde_json::Value;
use toold_protocol::ToolDefinition;

use super::rules::{Rule, Specifier};
use crate::tools::JudgedArguments;
use crate::tools::registry::is_valid_tool_name;

/// Why the rule `text` (already parsed) can never match, if it cannot. `known_tools` are the
/// tools registered now; a rule may name another tool (one a client or an MCP server may
/// register later, denied ahead of time), unless no tool can have that name or it is a near
/// miss of a known one. `cwd` and `home` are where relative and `~/` patterns start.
pub(crate) fn never_matches(
    text: &str,
    tools: &[ToolDefinition],
    cwd: Option<&Path>,
    home: &Path,
) -> Option<String> {
    // The anchor of a `/` pattern does not change whether it can match.
    Rule::parse_all(
        text,
        cwd.unwrap_or(Path::new("/")),
        home,
        Some(Path::new("/")),
    )
    .ok()?
    .iter()
    .find_map(|rule| rule_never_matches(rule, tools))
}

/// [`never_matches`] for one rule as read.
fn rule_never_matches(rule: &Rule, tools: &[ToolDefinition]) -> Option<String> {
    if rule.is_pattern() {
        return pattern_never_matches(rule, tools);
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
            let pattern = inner_text(rule)?;
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
            if pattern.contains("  ") || pattern.contains(|c: char| c.is_whitespace() && c != ' ') {
                let single: Vec<&str> = pattern.split_whitespace().collect();
                return Some(format!(
                    "{pattern:?} has two blanks in a row or a tab, and a command is matched as \
                     its words joined by single spaces: write {:?}",
                    single.join(" ")
                ));
            }
            return None;
        }
        _ => {}
    }
    if !rule.judged.takes_a_path() {
        return None;
    }
    let pattern = path_pattern(rule)?;
    if let JudgedArguments::Path { argument, .. } = rule.judged
        && let Some((name, rest)) = pattern.split_once('=')
        && name != argument
        && name.eq_ignore_ascii_case(argument)
    {
        return Some(format!(
            "{name:?} is read as part of the path, not as the argument {argument:?} (argument \
             names are matched exactly): write {argument}={rest}"
        ));
    }
    not_normalized(pattern)
}

/// The text between a rule's parentheses, as read.
fn inner_text(rule: &Rule) -> Option<&str> {
    rule.read_as.split_once('(')?.1.strip_suffix(')')
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
pub(crate) fn names_an_unknown_tool(
    text: &str,
    tools: &[ToolDefinition],
    home: &Path,
) -> Option<String> {
    let rules = Rule::parse_all(text, Path::new("/"), home, Some(Path::new("/"))).ok()?;
    let rule = rules
        .iter()
        .find(|rule| !rule.is_pattern() && !tools.iter().any(|tool| tool.name == rule.tool))?;
    if mcp_server_named(&rule.tool).is_some() {
        // An MCP server's tool: [`names_an_unknown_server`] says whether it can be.
        return None;
    }
    Some(format!(
        "no builtin tool is named {:?}; the rule covers only a tool a client registers under \
         that exact name",
        rule.tool
    ))
}

/// For the config file's own rules: a path pattern starting with one `/` is relative to the
/// file's directory (as in Claude Code's settings), which is seldom what is meant in toold's
/// config (a project's table is relative to its project): said, with the absolute form.
pub(crate) fn relative_to_its_file(text: &str, home: &Path) -> Option<String> {
    let rules = Rule::parse_all(text, Path::new("/"), home, Some(Path::new("/"))).ok()?;
    let pattern = rules
        .iter()
        .filter(|rule| matches!(rule.specifier, Specifier::Path(_)))
        .find_map(path_pattern)?;
    (pattern.starts_with('/') && !pattern.starts_with("//")).then(|| {
        format!(
            "{text:?}: a path starting with one '/' is relative to the directory of this file; \
             for the absolute path write \"/{pattern}\" (two '/', as in //etc/hosts)"
        )
    })
}

/// The MCP server a rule's tool part names (`mcp__S__T`, `mcp__S__*`), if it names one.
fn mcp_server_named(tool: &str) -> Option<&str> {
    crate::mcp::names::server_of(tool).filter(|server| !server.contains('*'))
}

/// Why `text` can never match when it names the tools of an MCP server that is not among
/// `servers` (the configured ones): only they register `mcp__S__…` tools.
pub(crate) fn names_an_unknown_server(text: &str, servers: &[&str], home: &Path) -> Option<String> {
    let rules = Rule::parse_all(text, Path::new("/"), home, Some(Path::new("/"))).ok()?;
    let server = rules
        .iter()
        .filter_map(|rule| mcp_server_named(&rule.tool))
        .find(|server| !servers.contains(server))?;
    let configured = if servers.is_empty() {
        "none is configured".to_owned()
    } else {
        format!("those configured are {}", servers.join(", "))
    };
    Some(format!(
        "it names the tools of the MCP server {server:?}, and no server of that name runs \
         ({configured}; `toold mcp list` shows them): add it as [mcp.servers.{server}] or \
         remove the rule"
    ))
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
            ("Read(secrets/../x)", "matched normalized"),
            ("Bash( cat *)", "starts or ends with blanks"),
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
            // As in a gitignore file, a directory's pattern covers what is inside it.
            "read_file(secrets)",
            "read_file(secrets/)",
            "edit_file(./secrets/deep)",
            "write_file(~/.ssh)",
            "Read(~/.ssh/)",
            "Bash(git push:*)",
            "Edit(src/**)",
        ] {
            assert_eq!(judged(text), None, "{text}");
        }
    }

    #[test]
    fn an_mcp_servers_rule_names_a_configured_server() {
        let home = Path::new("/home/u");
        let servers = ["fs", "github"];
        for text in [
            "mcp__fs",
            "mcp__fs__*",
            "mcp__github__create_issue",
            "mcp__*",
            "read_file",
        ] {
            assert_eq!(
                names_an_unknown_server(text, &servers, home),
                None,
                "{text}"
            );
        }
        for text in [
            "mcp__gitlab",
            "mcp__gitlab__*",
            "mcp__gitlab__open(title=*)",
        ] {
            let reason = names_an_unknown_server(text, &servers, home).expect(text);
            assert!(
                reason.contains("\"gitlab\"") && reason.contains("fs, github"),
                "{reason}"
            );
        }
        let none = names_an_unknown_server("mcp__x", &[], home).unwrap();
        assert!(none.contains("none is configured"), "{none}");
    }

    #[test]
    fn a_config_path_relative_to_its_file_is_said() {
        let home = Path::new("/home/u");
        let warning = relative_to_its_file("Read(/etc/hosts)", home).unwrap();
        assert!(warning.contains("\"//etc/hosts\""), "{warning}");
        for text in [
            "Read(//etc/hosts)",
            "Read(./x)",
            "Bash(/usr/bin/make)",
            "read_file",
        ] {
            assert_eq!(relative_to_its_file(text, home), None, "{text}");
        }
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("read_file", "raed_file"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
