//! An approval's `preview` shown to a person: a file tool's diff (coloured on a terminal that
//! wants colour: `+` green, `-` red, `@@` cyan), a command's directory, simple commands and
//! sandbox. Every byte that came from the model or a file is made visible first (`visible`),
//! and colour is added around what is already safe to show, so that nothing in the diff can
//! restyle or redraw the prompt.

use std::ffi::OsStr;

use toold_protocol::{CommandSandboxPreview, Preview};

use super::visible;

/// How a preview is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawing {
    /// Colour the diff's lines.
    pub colour: bool,
    /// Show at most this many bytes of the diff, cut after a whole line (the daemon sends up to
    /// 64 KiB; an MCP host shows far less).
    pub diff_max_bytes: usize,
}

/// Whether the terminal the prompt is written to gets colour: not when `NO_COLOR` is set to
/// anything but the empty string (<https://no-color.org>), nor for `TERM=dumb` or no `TERM`.
pub fn terminal_wants_colour() -> bool {
    wants_colour(
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    )
}

fn wants_colour(no_color: Option<&OsStr>, term: Option<&OsStr>) -> bool {
    no_color.is_none_or(OsStr::is_empty)
        && term.is_some_and(|term| !term.is_empty() && term != "dumb")
}

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// The preview as lines of the prompt, each ending in a newline.
pub fn describe(preview: &Preview, drawing: Drawing) -> String {
    match preview {
        Preview::Diff {
            path,
            diff,
            cut_bytes,
        } => {
            let path = visible::line(path);
            if diff.is_empty() {
                return format!("  change:    none, {path} stays as it is\n");
            }
            let cut_by_daemon = if *cut_bytes > 0 {
                format!(" ({cut_bytes} bytes of it cut by the daemon)")
            } else {
                String::new()
            };
            let (shown, cut_here) =
                toold::tools::preview::whole_lines(diff, drawing.diff_max_bytes);
            let mut text = format!("  change:    the diff of {path}{cut_by_daemon}:\n");
            text.push_str(&diff_lines(&visible::block(shown), drawing.colour));
            if cut_here > 0 {
                text.push_str(&format!(
                    "    [… {cut_here} more bytes of the diff not shown here]\n"
                ));
            }
            text
        }
        Preview::Unavailable { path, reason } => format!(
            "  change:    not worked out for {}: {}\n",
            visible::line(path),
            visible::line(reason)
        ),
        Preview::Command {
            cwd,
            commands,
            sandbox,
        } => {
            // One command a line: made visible, none can hold a newline that would fake
            // another.
            let commands: Vec<_> = commands
                .iter()
                .map(|command| visible::line(command))
                .collect();
            format!(
                "  runs in:   {}\n  commands:  {}\n  sandbox:   {}\n",
                visible::line(cwd),
                if commands.is_empty() {
                    "(none the analysis could read)".to_owned()
                } else {
                    commands.join("\n             ")
                },
                visible::line(&sandbox_line(sandbox))
            )
        }
        Preview::Other => String::new(),
    }
}

/// The sandbox in one line: `workspace_write, network off, writes under /w, /srv`.
fn sandbox_line(sandbox: &CommandSandboxPreview) -> String {
    let mut line = format!(
        "{}, network {}",
        sandbox.mode.as_str(),
        if sandbox.network { "on" } else { "off" }
    );
    if !sandbox.writable.is_empty() {
        line.push_str(&format!(", writes under {}", sandbox.writable.join(", ")));
    }
    if sandbox.escalation.is_some() {
        line.push_str(" (loosened as the call asks)");
    }
    line
}

/// The diff's lines indented under the prompt's fields, each coloured by what it is when
/// `colour`: the header (the lines before the first `@@`) bold, hunks cyan, removals red,
/// additions green. `diff` is already made visible: colour only wraps it.
fn diff_lines(diff: &str, colour: bool) -> String {
    let mut text = String::with_capacity(diff.len() + diff.len() / 8);
    let mut in_header = true;
    for line in diff.lines() {
        in_header &= !line.starts_with("@@");
        let style = match line.as_bytes().first() {
            _ if !colour => None,
            _ if in_header => Some(BOLD),
            Some(b'@') => Some(CYAN),
            Some(b'-') => Some(RED),
            Some(b'+') => Some(GREEN),
            _ => None,
        };
        match style {
            Some(style) => text.push_str(&format!("    {style}{line}{RESET}\n")),
            None => text.push_str(&format!("    {line}\n")),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use toold_protocol::SandboxMode;

    const DIFF: &str = "--- /w/a.txt\n+++ /w/a.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n";

    fn diff(text: &str) -> Preview {
        Preview::Diff {
            path: "/w/a.txt".into(),
            diff: text.into(),
            cut_bytes: 0,
        }
    }

    const PLAIN: Drawing = Drawing {
        colour: false,
        diff_max_bytes: 64 * 1024,
    };

    #[test]
    fn no_color_set_to_anything_turns_colour_off() {
        let term = Some(OsStr::new("xterm-256color"));
        assert!(wants_colour(None, term));
        assert!(wants_colour(Some(OsStr::new("")), term));
        assert!(!wants_colour(Some(OsStr::new("1")), term));
        assert!(!wants_colour(Some(OsStr::new("0")), term));
        assert!(!wants_colour(None, Some(OsStr::new("dumb"))));
        assert!(!wants_colour(None, None));
    }

    #[test]
    fn a_diff_is_coloured_line_by_line() {
        let shown = describe(
            &diff(DIFF),
            Drawing {
                colour: true,
                ..PLAIN
            },
        );
        assert_eq!(
            shown,
            "  change:    the diff of /w/a.txt:\n    \x1b[1m--- /w/a.txt\x1b[0m\n    \
             \x1b[1m+++ /w/a.txt\x1b[0m\n    \x1b[36m@@ -1,2 +1,2 @@\x1b[0m\n     a\n    \
             \x1b[31m-b\x1b[0m\n    \x1b[32m+c\x1b[0m\n"
        );
    }

    #[test]
    fn without_colour_the_diff_has_no_escape_at_all() {
        let shown = describe(&diff(DIFF), PLAIN);
        assert!(!shown.contains('\x1b'), "{shown:?}");
        assert!(shown.contains("    -b\n    +c\n"), "{shown:?}");
    }

    #[test]
    fn what_the_model_wrote_is_made_visible_before_it_is_coloured() {
        let shown = describe(
            &diff("@@ -1 +1 @@\n-a\n+\x1b[2J\x1b]0;pwned\x07\u{202e}x\r\n"),
            Drawing {
                colour: true,
                ..PLAIN
            },
        );
        assert!(
            shown.contains("    \x1b[32m+\\e[2J\\e]0;pwned\\x07\\u{202e}x\\r\x1b[0m\n"),
            "{shown:?}"
        );
        // The only escapes left are toold's own colours.
        assert_eq!(shown.matches('\x1b').count(), 6, "{shown:?}");
    }

    #[test]
    fn a_long_diff_is_cut_at_a_line_and_says_so() {
        let shown = describe(
            &diff(DIFF),
            Drawing {
                diff_max_bytes: 30,
                ..PLAIN
            },
        );
        assert_eq!(
            shown,
            "  change:    the diff of /w/a.txt:\n    --- /w/a.txt\n    +++ /w/a.txt\n    \
             [… 25 more bytes of the diff not shown here]\n"
        );
    }

    #[test]
    fn a_command_shows_where_what_and_how_confined() {
        let preview = Preview::Command {
            cwd: "/w".into(),
            commands: vec!["git status".into(), "wc -l".into()],
            sandbox: CommandSandboxPreview {
                mode: SandboxMode::WorkspaceWrite,
                network: false,
                writable: vec!["/w".into()],
                escalation: None,
            },
        };
        assert_eq!(
            describe(&preview, PLAIN),
            "  runs in:   /w\n  commands:  git status\n             wc -l\n  sandbox:   \
             workspace_write, network off, writes under /w\n"
        );
    }
}
