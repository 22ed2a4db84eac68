//! Claude Code's rule forms, read as toold's: its tool names (`Bash`, `Read`, `Edit`, …,
//! `mcp__server`) stand for the toold tools that do the same, a command pattern's closing
//! `:*` for a prefix at a word boundary; a form toold cannot honour (`WebFetch`, `WebSearch`,
//! `NotebookEdit`, Claude Code's own tools) is refused with the reason, never accepted inert.
//!
//! Pure text to text: what comes out is toold's own rule syntax, parsed as any rule is.

use super::RuleError;
use crate::mcp::names::PREFIX as MCP_PREFIX;

/// The toold tools a Claude Code tool name stands for: `Read` also what `search_code` and
/// `find_files` may read, and `Edit` every tool that edits files, as Claude Code documents
/// them. `Err` holds why a Claude Code tool toold lacks cannot be honoured; `Ok(None)`: the
/// name is not one of Claude Code's.
fn claude_tools(name: &str) -> Result<Option<&'static [&'static str]>, &'static str> {
    Ok(Some(match name {
        "Bash" => &["run_command"],
        "Read" => &["read_file", "search_code", "find_files"],
        "Edit" => &["edit_file", "write_file"],
        "MultiEdit" => &["edit_file"],
        "Write" => &["write_file"],
        "Grep" => &["search_code"],
        "Glob" | "LS" => &["find_files"],
        "WebFetch" | "WebSearch" => {
            return Err("toold has no tool that fetches or searches the web: a command's \
                        network is the sandbox's ([sandbox] network, or run_command's \
                        escalate {\"network\": true}, asked), so no rule of it can be honoured");
        }
        "NotebookEdit" | "NotebookRead" => {
            return Err("toold has no notebook tool: edit_file and write_file change .ipynb \
                        files as text, so write Edit(PATH) or edit_file(PATH)");
        }
        "Task" | "Agent" | "TodoWrite" | "TodoRead" | "ExitPlanMode" | "SlashCommand"
        | "Skill" | "BashOutput" | "KillShell" | "KillBash" => {
            return Err("it is a tool of Claude Code itself, which toold neither runs nor sees");
        }
        _ => return Ok(None),
    }))
}

/// The toold rules that `text` is read as: itself when it is already toold's, else one rule
/// per tool its Claude Code tool name stands for. A command pattern ending `:*` ends ` *`.
pub(super) fn read_as(text: &str) -> Result<Vec<String>, RuleError> {
    let refuse = |reason: String| RuleError::Unsupported {
        rule: text.to_owned(),
        reason,
    };
    let (name, rest) = match text.find('(') {
        Some(open) => (text[..open].trim(), &text[open..]),
        None => (text, ""),
    };
    let tools: Vec<String> = match claude_tools(name) {
        Err(reason) => return Err(refuse(reason.to_owned())),
        Ok(Some(tools)) => tools.iter().map(|tool| (*tool).to_owned()).collect(),
        // `mcp__server` alone: every tool of the server (whose tools are `mcp__server__T`).
        Ok(None) => match name.strip_prefix(MCP_PREFIX) {
            Some(server) if !server.is_empty() && !server.contains("__") && !server.contains('*') => {
                vec![format!("{name}__*")]
            }
            _ => vec![name.to_owned()],
        },
    };
    let rest = match tools.first().map(String::as_str) {
        Some("run_command") => command_prefix(rest).map_err(|reason| refuse(reason.to_owned()))?,
        _ => rest.to_owned(),
    };
    Ok(tools.into_iter().map(|tool| format!("{tool}{rest}")).collect())
}

/// A command rule's `(…)` and what follows, with a closing `:*` read as Claude Code reads it:
/// the pattern before it, then ` *` (that command alone, or with more words: `npm:*` is
/// `npm *`, which `npmx` does not match). `:*` anywhere else is refused: it would be read as
/// literal characters no one meant.
fn command_prefix(rest: &str) -> Result<String, &'static str> {
    let Some(close) = rest.rfind(')') else {
        return Ok(rest.to_owned());
    };
    let (inner, after) = (&rest[..close], &rest[close..]);
    match inner.strip_suffix(":*") {
        Some(prefix) if !prefix.contains(":*") => {
            Ok(format!("{} *{after}", prefix.trim_end()))
        }
        _ if inner.contains(":*") => Err("`:*` marks a prefix and only ends a command pattern \
             (`Bash(npm run test:*)`); for any run of characters inside one write `*`"),
        _ => Ok(rest.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<String> {
        read_as(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn claude_code_tool_names_stand_for_toold_tools() {
        assert_eq!(read("Bash"), ["run_command"]);
        assert_eq!(read("Bash(npm run test:*)"), ["run_command(npm run test *)"]);
        assert_eq!(read("Bash(git push:*) with network"), ["run_command(git push *) with network"]);
        assert_eq!(read("Bash(ls *)"), ["run_command(ls *)"]);
        assert_eq!(read("Bash(npm run build)"), ["run_command(npm run build)"]);
        assert_eq!(
            read("Read(./.env)"),
            ["read_file(./.env)", "search_code(./.env)", "find_files(./.env)"]
        );
        assert_eq!(read("Edit(docs/**)"), ["edit_file(docs/**)", "write_file(docs/**)"]);
        assert_eq!(read("MultiEdit(src/**)"), ["edit_file(src/**)"]);
        assert_eq!(read("Write(//tmp/x)"), ["write_file(//tmp/x)"]);
        assert_eq!(read("Grep"), ["search_code"]);
        assert_eq!(read("Glob(src/**)"), ["find_files(src/**)"]);
        assert_eq!(read("mcp__github"), ["mcp__github__*"]);
        assert_eq!(read("mcp__github__create_issue"), ["mcp__github__create_issue"]);
        // toold's own rules are read as written, but for a closing `:*`.
        assert_eq!(read("run_command(cargo test:*)"), ["run_command(cargo test *)"]);
        assert_eq!(read("run_command(command=git push:*)"), ["run_command(command=git push *)"]);
        assert_eq!(read("read_file(src/**)"), ["read_file(src/**)"]);
        assert_eq!(read("mcp__fs__*"), ["mcp__fs__*"]);
    }

    #[test]
    fn forms_toold_cannot_honour_are_refused_with_the_reason() {
        for (text, wanted) in [
            ("WebFetch(domain:example.com)", "web"),
            ("WebSearch", "web"),
            ("NotebookEdit(x.ipynb)", "notebook"),
            ("Task", "Claude Code itself"),
            ("Bash(git:* push)", "only ends a command pattern"),
            ("run_command(a:*b:*)", "only ends a command pattern"),
        ] {
            let error = read_as(text).expect_err(text).to_string();
            assert!(error.contains(wanted), "{text}: {error}");
            assert!(error.contains(text), "{text}: {error}");
        }
    }
}
