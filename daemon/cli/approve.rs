//! How `toold call`, `toold exec` and `toold watch` answer `approval/request`: on the
//! controlling terminal (`/dev/tty`, whatever stdin and stdout are) they ask the person
//! (`[y] once / [s] session / [n] deny / [a] abort`), showing the call as it is (see
//! `visible`), and stop asking when the approval is settled elsewhere; without one they
//! decline, leaving the approval to the session's other approvers (the call is denied if there
//! is none), unless `--yes` allows each call once. The request's preview (a diff, a command's
//! sandbox) is shown with it, coloured unless `NO_COLOR` says otherwise (see `preview`).

use std::borrow::Cow;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use toold_client::Approval;
use toold_protocol::{ApprovalAnswer, ApprovalDecision, ApprovalRequestParams, PREVIEW_MAX_BYTES};

use super::preview::{self, Drawing};
use super::visible::{self, RESET_BEFORE_PROMPT};

/// Who decides the approvals of this command's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalPolicy {
    /// Ask on the process's controlling terminal.
    AskOnTerminal,
    /// `--yes`: allow each call once.
    AllowOnce,
    /// No terminal and no `--yes`: decline, saying how to allow.
    Decline,
}

impl ApprovalPolicy {
    /// `--yes` wins; otherwise ask when the process has a controlling terminal, else decline.
    pub fn choose(yes: bool) -> Self {
        if yes {
            ApprovalPolicy::AllowOnce
        } else if open_terminal().is_ok() {
            ApprovalPolicy::AskOnTerminal
        } else {
            ApprovalPolicy::Decline
        }
    }
}

/// Why `toold` declines without a terminal: what the call's model (and the person reading the
/// result) sees when no other approver decides.
pub const NO_TERMINAL: &str = "`toold` has no terminal to ask on (it has no controlling \
     terminal); rerun with --yes to allow each call once, or add an allow rule for it to \
     the config";

/// Decides one approval request by `policy`. Asking happens on a blocking thread, one prompt
/// at a time (`prompt_lock`), so two requests never share the terminal.
pub async fn decide(
    policy: ApprovalPolicy,
    request: ApprovalRequestParams,
    prompt_lock: Arc<tokio::sync::Mutex<()>>,
) -> Approval {
    match policy {
        ApprovalPolicy::AllowOnce => ApprovalAnswer::new(ApprovalDecision::AllowOnce).into(),
        ApprovalPolicy::Decline => Approval::Decline(NO_TERMINAL.to_owned()),
        ApprovalPolicy::AskOnTerminal => {
            // Held by the prompt's thread until it ends, even when this future is dropped
            // (the approval settled elsewhere): two prompts never read the terminal at once.
            let one_prompt_at_a_time = prompt_lock.lock_owned().await;
            let withdrawn = Withdrawn::default();
            let asking = withdrawn.flag();
            let asked = tokio::task::spawn_blocking(move || {
                let _one_prompt_at_a_time = one_prompt_at_a_time;
                ask_on_terminal(&request, asking)
            })
            .await;
            // The blocking task only fails if it panicked: deny rather than run unasked.
            asked
                .unwrap_or_else(|_| ApprovalAnswer {
                    message: Some("denied: the approval prompt failed".to_owned()),
                    ..ApprovalAnswer::new(ApprovalDecision::Deny)
                })
                .into()
        }
    }
}

/// Set when the approval no longer needs this prompt's answer (its future was dropped: another
/// approver answered, or the call ended): the prompt stops reading the terminal, so that the
/// next prompt gets the next line typed.
#[derive(Default)]
struct Withdrawn(Arc<AtomicBool>);

impl Withdrawn {
    fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

impl Drop for Withdrawn {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// How often a prompt waiting for a line looks whether it was withdrawn.
const WITHDRAWN_CHECK: Duration = Duration::from_millis(100);

/// The terminal, read only when it has input and while the prompt is not withdrawn; a
/// withdrawn prompt's read fails with [`ErrorKind::ConnectionAborted`].
struct TerminalInput {
    terminal: std::fs::File,
    withdrawn: Arc<AtomicBool>,
}

impl Read for TerminalInput {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsFd;
        loop {
            if self.withdrawn.load(Ordering::Acquire) {
                return Err(std::io::Error::new(
                    ErrorKind::ConnectionAborted,
                    "the approval was settled elsewhere",
                ));
            }
            let mut ready = [PollFd::new(self.terminal.as_fd(), PollFlags::POLLIN)];
            match poll(
                &mut ready,
                PollTimeout::from(WITHDRAWN_CHECK.as_millis() as u16),
            ) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => return self.terminal.read(buffer),
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

/// The controlling terminal, for reading and writing. The prompt goes there rather than to
/// stderr, so that it is seen even when stdout and stderr go to files, and so that what the
/// call's own output wrote to stdout or stderr cannot answer it.
fn open_terminal() -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
}

fn ask_on_terminal(request: &ApprovalRequestParams, withdrawn: Arc<AtomicBool>) -> ApprovalAnswer {
    match open_terminal().and_then(|terminal| Ok((terminal.try_clone()?, terminal))) {
        Ok((terminal, mut prompt)) => {
            let input = TerminalInput {
                terminal,
                withdrawn,
            };
            let colour = preview::terminal_wants_colour();
            ask(request, &mut BufReader::new(input), &mut prompt, colour)
        }
        Err(error) => ApprovalAnswer {
            message: Some(format!("denied: cannot open the terminal to ask ({error})")),
            ..ApprovalAnswer::new(ApprovalDecision::Deny)
        },
    }
}

/// Shows the call and the reason on `prompt`, reads choices from `input` until one is valid.
/// The end of input denies. The preview's diff is coloured when `colour`.
pub fn ask(
    request: &ApprovalRequestParams,
    input: &mut impl BufRead,
    prompt: &mut impl Write,
    colour: bool,
) -> ApprovalAnswer {
    let drawing = Drawing {
        colour,
        diff_max_bytes: PREVIEW_MAX_BYTES,
    };
    // A terminal that cannot be written to still gets its answer read: ignore write errors.
    let _ = write!(
        prompt,
        "{RESET_BEFORE_PROMPT}{}",
        describe(request, drawing)
    );
    let choices = if request.always.is_some() {
        "[y] once / [s] session / [p] always (project) / [n] deny / [d] deny always / [a] abort? "
    } else {
        "[y] once / [s] session / [n] deny / [a] abort? "
    };
    loop {
        let _ = write!(prompt, "{RESET_BEFORE_PROMPT}{choices}");
        let _ = prompt.flush();
        let mut line = String::new();
        match input.read_line(&mut line) {
            Err(error) if error.kind() == ErrorKind::ConnectionAborted => {
                let _ = writeln!(prompt, "\n(settled elsewhere)");
                return ApprovalAnswer {
                    message: Some("denied: the approval was settled elsewhere".to_owned()),
                    ..ApprovalAnswer::new(ApprovalDecision::Deny)
                };
            }
            Ok(0) | Err(_) => {
                let _ = writeln!(prompt);
                return ApprovalAnswer {
                    message: Some("denied: the terminal closed before an answer".to_owned()),
                    ..ApprovalAnswer::new(ApprovalDecision::Deny)
                };
            }
            Ok(_) => {}
        }
        let choice = parse_choice(&line).filter(|decision| {
            request.always.is_some()
                || !matches!(
                    decision,
                    ApprovalDecision::AllowAlways | ApprovalDecision::DenyAlways
                )
        });
        match choice {
            Some(ApprovalDecision::Deny) => {
                return ApprovalAnswer {
                    message: Some("denied by the user".to_owned()),
                    ..ApprovalAnswer::new(ApprovalDecision::Deny)
                };
            }
            Some(decision) => return ApprovalAnswer::new(decision),
            None => {
                let always = if request.always.is_some() {
                    ", p (always allow in this project), d (always deny in this project)"
                } else {
                    ""
                };
                let _ = writeln!(
                    prompt,
                    "please answer y (allow once), s (allow for the session){always}, n (deny) \
                     or a (abort the batch)"
                );
            }
        }
    }
}

/// The call, its arguments and why it needs approval, as the prompt shows them: every field
/// on one line of its own, made visible; arguments longer than a screen's worth are followed by
/// their length, first and last characters, so that their start and end are seen next to the
/// question however long they are; then what the call will do (its preview, drawn as
/// `drawing` says).
pub fn describe(request: &ApprovalRequestParams, drawing: Drawing) -> String {
    described(request, drawing, Surface::Terminal)
}

/// [`describe`] for a host's form, whose choices name what each grants: no `toold:` to tell
/// the daemon's lines from others, no keys to press, no rule the choices already show.
pub fn describe_for_form(request: &ApprovalRequestParams, drawing: Drawing) -> String {
    described(request, drawing, Surface::Form)
}

/// Where an approval is asked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// A terminal, among other output, answered by a key.
    Terminal,
    /// A host's form, whose choices are labelled.
    Form,
}

fn described(request: &ApprovalRequestParams, drawing: Drawing, surface: Surface) -> String {
    let arguments = serde_json::to_string(&request.call.arguments)
        .unwrap_or_else(|_| request.call.arguments.to_string());
    let heading = match surface {
        Surface::Terminal => "\ntoold: ",
        Surface::Form => "",
    };
    let mut text = format!(
        "{heading}{} needs your approval (call {})\n  arguments: {}\n  reason:    {}\n",
        visible::line(&request.call.name),
        visible::line(&request.call.id),
        visible::line(&arguments),
        visible::line(&request.reason)
    );
    let length = arguments.chars().count();
    if length > LONG_ARGUMENTS {
        let head: String = arguments.chars().take(ENDS_SHOWN).collect();
        let tail: String = arguments.chars().skip(length - ENDS_SHOWN).collect();
        text.push_str(&format!(
            "  length:    {length} characters, from {} … to … {}\n",
            visible::line(&head),
            visible::line(&tail)
        ));
    }
    if let Some(escalation) = &request.escalation {
        // What approving loosens, and the model's reason: the person decides on these.
        text.push_str(&format!(
            "  leaves the sandbox: {}\n",
            visible::line(&escalation.loosened().join("; "))
        ));
        let justification = escalation
            .justification
            .as_deref()
            .unwrap_or("(none given)");
        text.push_str(&format!("  because:   {}\n", visible::line(justification)));
    }
    if surface == Surface::Terminal && !request.suggestions.is_empty() {
        let suggestions: Vec<Cow<'_, str>> = request
            .suggestions
            .iter()
            .map(|suggestion| visible::line(suggestion))
            .collect();
        text.push_str(&format!(
            "  [s] grants this session: {}\n",
            suggestions.join(", ")
        ));
    }
    if let Some(always) = request
        .always
        .as_ref()
        .filter(|_| surface == Surface::Terminal)
    {
        text.push_str(&format!(
            "  always:    allow or deny {} in {}, written to your config\n",
            visible::line(&always.rule),
            visible::line(&always.project)
        ));
    }
    // Last, so that its other fields stay together above the diff, and the diff's end next
    // to the question.
    if let Some(shown) = &request.preview {
        text.push_str(&preview::describe(shown, drawing));
    }
    text
}

/// Arguments longer than this (in characters) get their length and ends restated.
const LONG_ARGUMENTS: usize = 400;

/// How many characters of each end are restated.
const ENDS_SHOWN: usize = 60;

/// A typed answer: `y`/`yes`, `s`/`session`, `n`/`no`, `a`/`abort`, any case.
pub fn parse_choice(line: &str) -> Option<ApprovalDecision> {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "o" | "once" => Some(ApprovalDecision::AllowOnce),
        "s" | "session" => Some(ApprovalDecision::AllowSession),
        "p" | "always" => Some(ApprovalDecision::AllowAlways),
        "d" | "never" => Some(ApprovalDecision::DenyAlways),
        "n" | "no" | "deny" => Some(ApprovalDecision::Deny),
        "a" | "abort" => Some(ApprovalDecision::Abort),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toold_protocol::{Safety, ToolCall};

    fn request() -> ApprovalRequestParams {
        ApprovalRequestParams {
            session_id: "s_1".into(),
            batch_id: "b_1".into(),
            approval_id: "a_1".into(),
            call: ToolCall::new("call_1", "run_command", json!({"command": "rm -rf build"})),
            safety: Safety::SideEffect,
            reason: "no allow rule matches run_command(rm -rf build)".into(),
            suggestions: vec!["run_command(rm -rf build)".into()],
            escalation: None,
            always: None,
            preview: None,
        }
    }

    #[test]
    fn choices() {
        let cases = [
            ("y\n", Some(ApprovalDecision::AllowOnce)),
            (" Yes ", Some(ApprovalDecision::AllowOnce)),
            ("s", Some(ApprovalDecision::AllowSession)),
            ("N\n", Some(ApprovalDecision::Deny)),
            ("a", Some(ApprovalDecision::Abort)),
            ("", None),
            ("maybe", None),
        ];
        for (line, expected) in cases {
            assert_eq!(parse_choice(line), expected, "{line:?}");
        }
    }

    #[test]
    fn asks_again_until_an_answer_is_valid() {
        let mut prompt = Vec::new();
        let answer = ask(&request(), &mut "what\ns\n".as_bytes(), &mut prompt, false);
        assert_eq!(answer, ApprovalAnswer::new(ApprovalDecision::AllowSession));
        let shown = String::from_utf8(prompt).unwrap();
        assert!(
            shown.contains("run_command needs your approval (call call_1)"),
            "{shown}"
        );
        assert!(
            shown.contains("arguments: {\"command\":\"rm -rf build\"}"),
            "{shown}"
        );
        assert!(
            shown.contains("reason:    no allow rule matches"),
            "{shown}"
        );
        assert_eq!(
            shown.matches("[y] once / [s] session").count(),
            2,
            "{shown}"
        );
    }

    #[test]
    fn the_preview_comes_last_coloured_when_asked() {
        let request = ApprovalRequestParams {
            call: ToolCall::new(
                "call_1",
                "edit_file",
                json!({"path": "a.txt", "old_string": "b", "new_string": "c"}),
            ),
            preview: Some(toold_protocol::Preview::Diff {
                path: "/w/a.txt".into(),
                diff: "--- /w/a.txt\n+++ /w/a.txt\n@@ -1 +1 @@\n-b\n+c\n".into(),
                cut_bytes: 0,
            }),
            ..request()
        };
        let mut prompt = Vec::new();
        ask(&request, &mut "y\n".as_bytes(), &mut prompt, true);
        let shown = String::from_utf8(prompt).unwrap();
        let diff_at = shown
            .find("  change:    the diff of /w/a.txt:\n")
            .expect(&shown);
        assert!(shown.find("  reason:").expect(&shown) < diff_at, "{shown}");
        assert!(
            shown.contains("    \x1b[31m-b\x1b[0m\n    \x1b[32m+c\x1b[0m\n"),
            "{shown:?}"
        );
        let mut prompt = Vec::new();
        ask(&request, &mut "y\n".as_bytes(), &mut prompt, false);
        let shown = String::from_utf8(prompt).unwrap();
        assert!(shown.contains("    -b\n    +c\n"), "{shown:?}");
    }

    #[test]
    fn the_end_of_input_denies() {
        let answer = ask(&request(), &mut "".as_bytes(), &mut Vec::new(), false);
        assert_eq!(answer.decision, ApprovalDecision::Deny);
        let answer = ask(&request(), &mut "n\n".as_bytes(), &mut Vec::new(), false);
        assert_eq!(answer.decision, ApprovalDecision::Deny);
        assert_eq!(answer.message.as_deref(), Some("denied by the user"));
    }
}
