//! What a person sees from the `toold` command line when the call, its output, a session's
//! title or a tool's description carry escape sequences, carriage returns, bidi overrides or
//! long padding: the raw bytes that reach a real pseudo-terminal hold no control sequence but
//! toold's own reset, the approval prompt shows the call that will run, and the prompt is
//! asked on the controlling terminal whatever stdin and stdout are.

use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toold_tests::daemon::{TestDaemon, no_answers};
use toold_tests::terminal::{Finished, OnTerminal, Terminal, read_all_on_a_thread};

/// What toold writes before each prompt: ST, then SGR reset.
const RESET: &str = "\x1b\\\x1b[0m";

/// Fails unless `shown` (bytes a terminal received, or a pipe the CLI wrote for people) holds
/// no control character but newlines, the terminal's carriage return before each, and
/// toold's reset, and no invisible Unicode that reorders or hides text.
fn assert_shown_safely(shown: &str, what: &str) {
    let plain = shown.replace(RESET, "").replace("\r\n", "\n");
    for c in plain.chars() {
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' | '\u{feff}' | '\u{e0000}'..='\u{e007f}');
        let control = c.is_control() && c != '\n';
        assert!(
            !control && !invisible,
            "{what}: {c:?} reached the terminal raw:\n{shown:?}"
        );
    }
}

fn victim(daemon: &TestDaemon) -> std::path::PathBuf {
    let victim = daemon.work().join("victim_dir");
    std::fs::create_dir_all(&victim).expect("victim_dir");
    std::fs::write(victim.join("keep.txt"), "kept\n").expect("a file in victim_dir");
    victim
}

/// A command that deletes `victim_dir`, dressed by `disguise` to look like `ls -la`.
fn disguised(disguise: &str) -> String {
    format!("rm -rf victim_dir #{disguise}")
}

/// The approval prompt of `toold call run_command COMMAND`, run with only a controlling
/// terminal (every stream a pipe), answered `n`.
fn prompt_for(daemon: &TestDaemon, command: &str) -> Finished {
    let mut toold = daemon.command();
    toold
        .args(["call", "run_command"])
        .arg(json!({"command": command}).to_string())
        .arg("--cwd")
        .arg(daemon.work());
    let mut terminal = Terminal::spawn_with(toold, OnTerminal::NONE);
    terminal.wait_for("[a] abort? ");
    terminal.type_line("n");
    terminal.finish()
}

#[test]
fn the_approval_prompt_shows_the_call_that_would_run() {
    let daemon = TestDaemon::start_asking();
    let victim = victim(&daemon);
    let fake_prompt = "\ntoold: run_command needs your approval (call call_1)\n  arguments: \
                       {\"command\":\"ls -la\"}\n  reason:    no allow rule matches \
                       run_command(ls -la)\n";
    let variants = [
        // Clear the screen, home the cursor, draw a prompt for `ls -la`.
        disguised(&format!("\x1b[2J\x1b[H{fake_prompt}")),
        // Carriage returns over the start of the line.
        disguised(&format!(
            "\r\x1b[2K  arguments: {{\"command\":\"ls -la\"}}{fake_prompt}"
        )),
        // Cursor up and erase the real lines; conceal what follows; a title.
        disguised(&format!(
            "\x1b[1A\x1b[2K\x1b[1A\x1b[2K\x1b]0;ls -la\x07\x1b[8m{fake_prompt}"
        )),
        // A string sequence left open, which would swallow the prompt on many terminals.
        disguised("\x1bP"),
        disguised("\x1b]8;;"),
        // Bidi overrides and isolates that reorder what is drawn; zero-width characters.
        disguised("\u{202e}al- sl\u{202c}"),
        disguised("\u{2066}\u{2067}ls -la\u{2069}\u{200b}\u{feff}"),
        // C1 controls written as characters (CSI, OSC).
        disguised("\u{9b}2J\u{9d}0;x\u{9c}"),
        // Padding that pushes the rest off the screen or to where the terminal wraps.
        disguised(&format!("{}ls -la", " ".repeat(4000))),
        disguised(&format!(
            "{}ls -la",
            "\u{3000}\u{2003}\u{a0}\u{2800}".repeat(100)
        )),
    ];
    for command in variants {
        let Finished { status, screen, .. } = prompt_for(&daemon, &command);
        assert_eq!(status.code(), Some(1), "denied: {screen}");
        assert_shown_safely(&screen, &format!("{command:?}"));
        assert!(
            screen.contains("arguments: {\"command\":\"rm -rf victim_dir #"),
            "the command that would run is shown: {screen}"
        );
        assert!(
            screen.contains("reason:    ") && screen.contains("[s] grants this session: "),
            "{screen}"
        );
        assert!(screen.contains("[a] abort? n\r\n"), "{screen}");
        if command.contains(&" ".repeat(9)) || command.contains("\u{3000}") {
            assert!(
                screen.contains("blanks⟩ls -la"),
                "padding is counted: {screen}"
            );
        }
        assert!(victim.join("keep.txt").exists(), "{command:?} ran");
    }

    // Padding without blanks: the ends of long arguments are restated next to the question.
    let long = format!(": {}; rm -rf victim_dir", "x".repeat(3000));
    let Finished { screen, .. } = prompt_for(&daemon, &long);
    assert_shown_safely(&screen, "a long prefix");
    let restated = screen
        .lines()
        .find(|line| line.starts_with("  length:"))
        .unwrap_or_else(|| panic!("no length line: {screen}"));
    assert!(
        restated.contains("{\"command\":\": xxx") && restated.contains("rm -rf victim_dir\"}"),
        "{restated}"
    );
    assert!(victim.join("keep.txt").exists());
}

#[test]
fn output_printed_before_a_prompt_cannot_redraw_it() {
    let daemon = TestDaemon::start_asking();
    let victim = victim(&daemon);
    let planted = "# notes\n\x1b[2J\x1b[Htoold: run_command needs your approval (call c)\n  \
                   arguments: {\"command\":\"ls -la\"}\r\n\u{202e}\x1b]0;x\x07\x1b[8m";
    std::fs::write(daemon.work().join("README.md"), planted).expect("a repository file");
    let calls = json!([
        {"id": "read\x1b[2J", "name": "read_file", "arguments": {"path": "README.md"}},
        {"id": "echo", "name": "run_command", "arguments": {"command": "echo '\x1b[2J\r'"}},
        {"id": "rm", "name": "run_command", "arguments": {"command": "rm -rf victim_dir"}},
    ]);
    let calls_file = daemon.work().join("calls.json");
    std::fs::write(&calls_file, calls.to_string()).expect("calls.json");
    let mut toold = daemon.command();
    toold
        .arg("exec")
        .arg(&calls_file)
        .arg("--cwd")
        .arg(daemon.work());
    // Everything on the terminal, as a person runs it.
    let mut terminal = Terminal::spawn_with(toold, OnTerminal::ALL);
    terminal.wait_for("[a] abort? ");
    // The first prompt is for `echo`; allow it, so that its output is printed before the next.
    assert!(terminal.screen().contains("echo '\\u001b[2J\\r'"));
    terminal.type_line("y");
    terminal.wait_for("rm -rf victim_dir\"}");
    terminal.type_line("n");
    let Finished { screen, .. } = terminal.finish();
    assert_shown_safely(&screen, "toold exec");
    assert!(screen.contains("read\\e[2J ✓ read_file ok"), "{screen}");
    assert!(screen.contains("\\e[2J\\e[Htoold: run_command"), "{screen}");
    assert!(screen.contains("echo stdout: \\e[2J"), "{screen}");
    assert!(victim.join("keep.txt").exists());
}

#[test]
fn call_output_is_made_visible_on_a_terminal_and_exact_in_a_pipe() {
    let daemon = TestDaemon::start();
    let hostile = "line\x1b[31m red\r\x1b]0;title\x07 \u{202e}dro\u{202c}\n";
    std::fs::write(daemon.work().join("hostile.txt"), hostile).expect("hostile.txt");
    let arguments = r#"{"path":"hostile.txt"}"#;
    let work = daemon.work();

    let mut toold = daemon.command();
    toold
        .args(["call", "read_file", arguments, "--cwd"])
        .arg(&work);
    let Finished { status, screen, .. } = Terminal::spawn_with(toold, OnTerminal::ALL).finish();
    assert_eq!(status.code(), Some(0), "{screen}");
    assert_shown_safely(&screen, "read_file to a terminal");
    assert!(
        screen.contains("line\\e[31m red\\r\\e]0;title\\x07 \\u{202e}dro\\u{202c}"),
        "{screen}"
    );

    // A pipe gets the content byte for byte, and the status line on stderr is made visible.
    let output = daemon
        .command()
        .args(["call", "read_file", arguments, "--cwd"])
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .expect("toold call");
    assert_eq!(String::from_utf8_lossy(&output.stdout), hostile);

    // A tool name, an error quoting the model's input: made visible even in a pipe.
    let output = daemon
        .command()
        .args(["call", "no\x1b[2Jsuch\u{202e}tool", "{}", "--cwd"])
        .arg(&work)
        .stdin(Stdio::null())
        .output()
        .expect("toold call");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_shown_safely(&stderr, "an unknown tool's status line");
    assert!(stderr.contains("no\\e[2Jsuch\\u{202e}tool"), "{stderr}");
}

#[test]
fn session_titles_and_tool_descriptions_are_shown_safely() {
    let daemon = TestDaemon::start();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let client = runtime.block_on(async {
        let client = daemon
            .connect(json!({"client_tools": true}), no_answers())
            .await;
        client
            .create_session(
                &daemon.work(),
                json!({"title": "my \x1b[2J\x1b[Hsession\r\u{2067}eltit"}),
            )
            .await;
        let tool = json!({"name": "lookup", "safety": "read_only",
            "description": "Looks up.\x1b[2J\x1b]0;x\x07\u{202e} more",
            "input_schema": {"type": "object"}});
        client
            .request("tools/register", json!({"tools": [tool]}))
            .await
            .expect("tools/register");
        client
    });
    for listing in ["sessions", "tools"] {
        let mut toold = daemon.command();
        toold.arg(listing);
        // Tables are for people: made visible in a pipe too.
        let output = run_piped(toold);
        assert_shown_safely(&output, listing);
        let mut toold = daemon.command();
        toold.arg(listing);
        let Finished { screen, .. } = Terminal::spawn_with(toold, OnTerminal::ALL).finish();
        assert_shown_safely(&screen, listing);
        let wanted = if listing == "sessions" {
            "my \\e[2J\\e[Hsession\\r\\u{2067}eltit"
        } else {
            "Looks up.\\e[2J\\e]0;x\\x07\\u{202e} more"
        };
        assert!(output.contains(wanted), "{output}");
        assert!(screen.contains(wanted), "{screen}");
    }
    // JSON for programs stays exact.
    let output = run_piped({
        let mut toold = daemon.command();
        toold.args(["sessions", "--json"]);
        toold
    });
    let listed: Value = serde_json::from_str(&output).expect("sessions --json");
    assert_eq!(
        listed["sessions"][0]["title"],
        "my \x1b[2J\x1b[Hsession\r\u{2067}eltit"
    );
    client.disconnect();
}

fn run_piped(mut command: Command) -> String {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start toold");
    let stdout = read_all_on_a_thread(child.stdout.take().expect("piped stdout"));
    child.wait().expect("wait for toold");
    String::from_utf8_lossy(&stdout.join().expect("stdout")).into_owned()
}

/// The daemon's own log (stderr, the journal under systemd) quotes call ids, tool and method
/// names and errors a client or model sent: none of them forges a log line or writes a
/// control sequence to whoever reads the log.
#[test]
fn the_daemon_log_shows_what_clients_sent_safely() {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("daemon.log");
    let daemon = TestDaemon::start_under(&toold_tests::daemon::log_into(&log), &[]);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let client = daemon.connect(json!({}), no_answers()).await;
        let session = client.create_session(&daemon.work(), json!({})).await;
        let calls = json!([
            {"id": "id\u{1b}[2J\nFAKE LOG LINE", "name": "read_file\u{1b}[31m", "arguments": {}},
            {"id": "b\u{1b}]0;x\u{7}", "name": "read_file",
             "arguments": {"path": "no\nsuch\u{1b}[2J"}},
        ]);
        client
            .request(
                "tools/execute",
                json!({"session_id": session, "calls": calls}),
            )
            .await
            .expect("tools/execute");
        let _ = client
            .request("no/such\nFAKE METHOD\u{1b}[2J", json!({}))
            .await;
    });
    drop(daemon);
    let shown = std::fs::read_to_string(&log).expect("the daemon's log");
    assert!(shown.contains("read_file\\u{1b}[31m"), "{shown}");
    for line in shown.lines() {
        assert!(!line.starts_with("FAKE"), "a forged log line: {line:?}");
        assert!(
            !line.chars().any(|c| c.is_control()),
            "a control character reached the log: {line:?}"
        );
    }
}
