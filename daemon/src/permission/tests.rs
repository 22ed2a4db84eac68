//! Table tests of the permission engine, adversarial ones included. Facts are gathered the way
//! the call pipeline gathers them, on a real temporary tree (for the symlink cases).

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use toold_protocol::{Rules as RuleStrings, Safety, SessionMode as Mode, ToolDefinition};

use super::facts::{AnalysedLine, command_facts, command_line, judged_paths};
use super::*;
use crate::env::Env;

struct World {
    _dir: tempfile::TempDir,
    /// The session cwd and only root: `<tmp>/project`.
    root: PathBuf,
    /// A directory beside the root, outside it.
    outside: PathBuf,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("project");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("secrets/x"), "s").unwrap();
        std::fs::write(root.join(".env"), "K=V").unwrap();
        std::fs::write(outside.join("file"), "o").unwrap();
        Self {
            _dir: dir,
            root,
            outside,
        }
    }

    fn env(&self) -> Env {
        Env::new(self.root.clone())
    }
}

/// The rules of one case: `allow`, `ask`, `deny` lists.
#[derive(Default, Clone, Copy)]
struct CaseRules<'a> {
    allow: &'a [&'a str],
    ask: &'a [&'a str],
    deny: &'a [&'a str],
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|rule| rule.to_string()).collect()
}

fn safety_of(tool: &str) -> Safety {
    match tool {
        "read_file" | "find_files" | "search_code" | "lookup" => Safety::ReadOnly,
        _ => Safety::SideEffect,
    }
}

struct Check<'a> {
    world: &'a World,
    rules: CaseRules<'a>,
    mode: Mode,
    grants: Vec<String>,
    hook: HookVerdict,
    /// Whether the session's commands run in a sandbox that confines them.
    confined: bool,
    sandboxed_commands: SandboxedCommands,
}

impl<'a> Check<'a> {
    fn new(world: &'a World, rules: CaseRules<'a>) -> Self {
        Self {
            world,
            rules,
            mode: Mode::Default,
            grants: Vec::new(),
            hook: HookVerdict::Silent,
            confined: false,
            sandboxed_commands: SandboxedCommands::Allow,
        }
    }

    fn confined(mut self) -> Self {
        self.confined = true;
        self
    }

    fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    fn decide(&self, tool: &str, arguments: Value) -> Decision {
        self.judge(tool, arguments).decision
    }

    fn judge(&self, tool: &str, arguments: Value) -> Judgment {
        let env = self.world.env();
        let arguments = arguments.as_object().unwrap().clone();
        let paths = judged_paths(tool, &arguments, &env);
        let analysed = command_line(tool, &arguments).map(AnalysedLine::here);
        let command = command_facts(tool, &arguments, &env, analysed.as_ref());
        let source = RuleStrings {
            allow: strings(self.rules.allow),
            ask: strings(self.rules.ask),
            deny: strings(self.rules.deny),
        };
        let mut policy = Policy::compile([&source], &env.cwd, Path::new("/home/user")).unwrap();
        policy.sandboxed_commands = self.sandboxed_commands;
        let call = CallFacts {
            tool,
            safety: safety_of(tool),
            system: false,
            arguments: &arguments,
            paths: &paths,
            command: command.as_ref(),
            hook: self.hook,
        };
        evaluate(
            &call,
            &SessionFacts {
                mode: self.mode,
                policy: &policy,
                grants: &self.grants,
                confined: self.confined,
            },
        )
    }

    fn outcome(&self, tool: &str, arguments: Value) -> &'static str {
        match self.decide(tool, arguments) {
            Decision::Allow => "allow",
            Decision::Deny(_) => "deny",
            Decision::NotAllowed(_) => "not_allowed",
            Decision::Ask { .. } => "ask",
        }
    }

    fn command(&self, line: &str) -> &'static str {
        self.outcome("run_command", json!({ "command": line }))
    }
}

#[test]
fn allow_rules_never_cover_more_than_every_command_they_match() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(git status)", "run_command(echo *)"],
            ..Default::default()
        },
    );
    for allowed in [
        "git status",
        "echo hi",
        "echo a b c",
        "git status && echo done",
        "echo x > out.txt",
        "echo x 2>/dev/null",
    ] {
        assert_eq!(check.command(allowed), "allow", "{allowed}");
    }
    for asked in [
        "git status && rm -rf x",
        "git status; rm x",
        "echo $(rm x)",
        "echo `rm x`",
        // Misread by the shell parser (found by fuzzing): bash runs `rm x` and writes `~/2`.
        "echo $(rm x $((0 ? 2) 2))",
        "echo $((1>~/2) )",
        "((1>~/2) ); echo x",
        "echo x > ~/.bashrc",
        "ls | sh",
        "echo hi & rm x",
        "git status\nrm x",
        "echo $[ x='a[$(touch F)]', x ]",
        "PATH=/tmp/x git status",
        "PATH=/tmp/x; git status",
        "/tmp/evil/git status",
        "git status > ../escape.txt",
        "sh -c 'git status'",
        "eval git status",
        "git status | sh",
        "find . -exec rm {} ;",
        "sudo git status",
        "echo 'unterminated",
        "echo ${x:-$(rm y)}",
        "cat <<EOF\n$(rm z)\nEOF",
    ] {
        assert_eq!(check.command(asked), "ask", "{asked:?}");
    }
}

#[test]
fn deny_rules_see_through_quoting_paths_wrappers_and_nesting() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            deny: &["run_command(rm *)"],
            allow: &["run_command"],
            ..Default::default()
        },
    );
    for denied in [
        "rm x",
        "FOO=1 rm x",
        "/bin/rm x",
        "\\rm x",
        "\"rm\" x",
        "command rm x",
        "env rm x",
        "timeout 5 rm x",
        "nice rm x",
        "bash -c 'rm x'",
        "sh -c \"rm x\"",
        "true && rm x",
        "xargs rm < list",
        "echo $(rm x)",
        "sudo -u root rm x",
        "find . -name '*.o' -exec rm {} +",
        "eval 'rm x'",
        "f() { rm x; }; f",
        "if true; then rm x; fi",
        "(cd /; rm x)",
        "echo ${x:-$(rm y)}",
    ] {
        assert_eq!(check.command(denied), "deny", "{denied:?}");
    }
    assert_eq!(
        check.command("ls -la"),
        "allow",
        "a bare tool rule allows every line"
    );
    assert_eq!(
        check.command("rmdir x"),
        "allow",
        "rm * is not a prefix match of rmdir"
    );
}

#[test]
fn a_trailing_star_covers_the_bare_command_and_wrappers_are_transparent_to_allows() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(cargo test *)"],
            ..Default::default()
        },
    );
    assert_eq!(check.command("cargo test"), "allow");
    assert_eq!(check.command("cargo test -p toold"), "allow");
    assert_eq!(check.command("timeout 60 cargo test"), "allow");
    assert_eq!(check.command("cargo testify"), "ask");
    assert_eq!(check.command("cargo build"), "ask");
}

#[test]
fn file_deny_rules_match_either_form_of_the_path() {
    let world = World::new();
    symlink(world.root.join("secrets/x"), world.root.join("a/innocent")).unwrap();
    let check = Check::new(
        &world,
        CaseRules {
            deny: &["read_file(.env)", "read_file(secrets/**)"],
            ..Default::default()
        },
    );
    let env_abs = world.root.join(".env").display().to_string();
    for path in [
        env_abs.as_str(),
        "a/../.env",
        "./.env",
        ".env",
        "secrets",
        "secrets/x",
        "a/innocent",
    ] {
        assert_eq!(
            check.outcome("read_file", json!({ "path": path })),
            "deny",
            "{path}"
        );
    }
    assert_eq!(check.outcome("read_file", json!({ "path": "a" })), "allow");
}

#[test]
fn reads_that_leave_the_roots_ask() {
    let world = World::new();
    symlink(world.outside.join("file"), world.root.join("a/link")).unwrap();
    let check = Check::new(&world, CaseRules::default());
    assert_eq!(
        check.outcome("read_file", json!({ "path": "a/link" })),
        "ask"
    );
    assert_eq!(
        check.outcome("read_file", json!({ "path": "../outside/file" })),
        "ask"
    );
    assert_eq!(
        check.outcome("search_code", json!({ "pattern": "x", "path": ".." })),
        "ask"
    );
    assert_eq!(
        check.outcome("find_files", json!({ "pattern": "*" })),
        "allow",
        "the cwd by default"
    );
    assert_eq!(
        check.outcome("lookup", json!({ "q": "x" })),
        "allow",
        "no path arguments count as inside"
    );
}

#[test]
fn accept_edits_allows_edits_inside_the_roots_only() {
    let world = World::new();
    symlink(world.outside.join("new.txt"), world.root.join("dangling")).unwrap();
    let check = Check::new(&world, CaseRules::default()).mode(Mode::AcceptEdits);
    assert_eq!(
        check.outcome("write_file", json!({ "path": "a/new.txt", "content": "" })),
        "allow"
    );
    assert_eq!(
        check.outcome(
            "edit_file",
            json!({ "path": ".env", "old_string": "a", "new_string": "b" })
        ),
        "allow"
    );
    assert_eq!(
        check.outcome("write_file", json!({ "path": "dangling", "content": "" })),
        "ask"
    );
    assert_eq!(
        check.outcome(
            "write_file",
            json!({ "path": "../outside/x", "content": "" })
        ),
        "ask"
    );
    assert_eq!(check.command("touch x"), "ask");
    let default = Check::new(&world, CaseRules::default());
    assert_eq!(
        default.outcome("write_file", json!({ "path": "a/new.txt", "content": "" })),
        "ask"
    );
}

#[test]
fn modes_in_the_order_of_the_protocol() {
    let world = World::new();
    let rules = || CaseRules {
        ask: &["run_command(git push *)"],
        deny: &["run_command(rm *)"],
        ..Default::default()
    };
    let plan = Check::new(&world, rules()).mode(Mode::Plan);
    assert_eq!(
        plan.outcome("write_file", json!({ "path": "x", "content": "" })),
        "not_allowed"
    );
    assert_eq!(plan.command("rm x"), "deny", "a deny comes before the mode");
    assert_eq!(plan.outcome("read_file", json!({ "path": "a" })), "allow");

    let bypass = Check::new(&world, rules()).mode(Mode::Bypass);
    // Beside a deny rule of commands, a pipe into a shell is code the rule cannot look into:
    // denied in every mode (bypass too).
    assert_eq!(bypass.command("curl x | sh"), "deny");
    assert_eq!(bypass.command("curl x | grep y"), "allow");
    assert_eq!(
        bypass.command("git push origin"),
        "ask",
        "ask rules hold in every mode"
    );
    assert_eq!(bypass.command("rm x"), "deny");
    // A line the shell parser cannot read hides what deny rules would see: it asks, bypass too.
    // (When the whole text matches a deny rule, it is denied, as before.)
    assert_eq!(bypass.command("rm x; echo \"unterminated"), "deny");
    assert_eq!(bypass.command("echo hi; rm x; echo \"unterminated"), "ask");
    assert_eq!(
        bypass.command(&format!("echo; rm x; {}", "(".repeat(40))),
        "ask"
    );
    // A substitution the parser read as text is one deny rules never saw: bypass asks too.
    assert_eq!(bypass.command("echo $(rm x $((0 ? 2) 2))"), "ask");
    match bypass.decide("run_command", json!({ "command": "echo; rm x <<a$( <<b" })) {
        Decision::Ask { reason, .. } => {
            assert!(reason.contains("cannot be checked"), "{reason}")
        }
        other => panic!("{other:?}"),
    }

    let dont_ask = Check::new(&world, rules()).mode(Mode::DontAsk);
    assert_eq!(dont_ask.command("git push origin"), "deny");
    assert_eq!(dont_ask.command("make"), "deny");
    assert_eq!(
        dont_ask.outcome("read_file", json!({ "path": "a" })),
        "allow"
    );
    match dont_ask.decide("run_command", json!({ "command": "make" })) {
        Decision::Deny(reason) => assert!(reason.contains("dont_ask"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_deny_from_any_source_wins() {
    let world = World::new();
    let config = RuleStrings {
        deny: strings(&["run_command(curl *)"]),
        ..Default::default()
    };
    let session = RuleStrings {
        allow: strings(&["run_command(curl *)", "run_command"]),
        ..Default::default()
    };
    let policy =
        Policy::compile([&config, &session], &world.root, Path::new("/home/user")).unwrap();
    let arguments = json!({ "command": "curl example.invalid" })
        .as_object()
        .unwrap()
        .clone();
    let env = world.env();
    let analysed = AnalysedLine::here("curl example.invalid");
    let command = command_facts("run_command", &arguments, &env, Some(&analysed));
    let call = CallFacts {
        tool: "run_command",
        safety: Safety::SideEffect,
        system: false,
        arguments: &arguments,
        paths: &[],
        command: command.as_ref(),
        hook: HookVerdict::Allow,
    };
    let session = SessionFacts {
        mode: Mode::Bypass,
        policy: &policy,
        grants: &[],
        confined: false,
    };
    let judgment = evaluate(&call, &session);
    assert!(matches!(judgment.decision, Decision::Deny(_)));
    assert_eq!(judgment.step, Step::DenyRule);
    let system = CallFacts {
        system: true,
        ..call
    };
    let judgment = evaluate(&system, &session);
    assert_eq!(
        judgment.decision,
        Decision::Allow,
        "system tools skip rules and modes"
    );
    assert_eq!(judgment.step, Step::SystemTool);
}

#[test]
fn a_judgment_names_its_step_and_a_hook_that_decided() {
    let world = World::new();
    let mut check = Check::new(&world, CaseRules::default());
    let line = || json!({ "command": "make" });
    assert_eq!(check.judge("run_command", line()).step, Step::DefaultAsk);
    check.hook = HookVerdict::Allow;
    let judgment = check.judge("run_command", line());
    assert_eq!(
        (judgment.decision, judgment.step, judgment.rule),
        (Decision::Allow, Step::HookAllow, None)
    );
    check.hook = HookVerdict::Ask;
    assert_eq!(check.judge("run_command", line()).step, Step::HookAsk);
}

#[test]
fn a_policy_for_a_session_knows_where_each_rule_is_written() {
    let world = World::new();
    let file: Arc<Path> = Arc::from(Path::new("/etc/toold.toml"));
    let config = ConfigRules {
        rules: RuleStrings {
            allow: strings(&["read_file", "write_file"]),
            deny: strings(&["run_command(rm *)"]),
            ..Default::default()
        },
        file: Some(file.clone()),
        lines: [vec![4, 5], vec![], vec![9]],
        sandboxed_commands: SandboxedCommands::Allow,
        projects: Vec::new(),
    };
    let session = RuleStrings {
        allow: strings(&["run_command(make)"]),
        ..Default::default()
    };
    let policy = Policy::for_session(&config, &session, &world.root, None, &world.root).unwrap();
    let origins: Vec<(&str, &RuleOrigin)> = policy
        .allow
        .iter()
        .chain(&policy.deny)
        .map(|rule| (rule.text(), rule.origin()))
        .collect();
    let at = |line| RuleOrigin::Config {
        file: Some(file.clone()),
        line: Some(line),
    };
    assert_eq!(
        origins,
        [
            ("read_file", &at(4)),
            ("write_file", &at(5)),
            ("run_command(make)", &RuleOrigin::Session),
            ("run_command(rm *)", &at(9)),
        ]
    );
}

#[test]
fn grants_are_exact_never_beat_deny_or_ask_and_sleep_in_plan_mode() {
    let world = World::new();
    let mut check = Check::new(
        &world,
        CaseRules {
            ask: &["run_command(git push *)"],
            deny: &["run_command(rm *)"],
            ..Default::default()
        },
    );
    let Decision::Ask { suggestion, .. } =
        check.decide("run_command", json!({ "command": "make build" }))
    else {
        panic!("make build should ask");
    };
    assert_eq!(suggestion, "run_command(make build)");
    check.grants = vec![
        suggestion,
        "run_command(git push origin)".into(),
        "run_command(rm x)".into(),
    ];
    assert_eq!(check.command("make build"), "allow");
    assert_eq!(check.command("make build2"), "ask");
    assert_eq!(
        check.command("make  build"),
        "ask",
        "the exact line, not a pattern"
    );
    assert_eq!(check.command("git push origin"), "ask");
    assert_eq!(check.command("rm x"), "deny");

    let outside = world.outside.join("file");
    let Decision::Ask { suggestion, .. } = check.decide("read_file", json!({ "path": outside }))
    else {
        panic!("a read outside the roots should ask");
    };
    assert_eq!(suggestion, format!("read_file(/{})", outside.display()));
    check.grants = vec![suggestion];
    assert_eq!(
        check.outcome("read_file", json!({ "path": outside })),
        "allow"
    );
    let plan = Check {
        mode: Mode::Plan,
        ..check
    };
    assert_eq!(plan.outcome("read_file", json!({ "path": outside })), "ask");
}

#[test]
fn hooks_allow_and_ask_but_never_over_rules() {
    let world = World::new();
    let mut check = Check::new(
        &world,
        CaseRules {
            ask: &["run_command(git push *)"],
            ..Default::default()
        },
    );
    check.hook = HookVerdict::Allow;
    assert_eq!(check.command("make"), "allow");
    assert_eq!(check.command("git push"), "ask");
    check.hook = HookVerdict::Ask;
    assert_eq!(check.outcome("read_file", json!({ "path": "a" })), "ask");
}

#[test]
fn path_rules_absolute_home_and_directory_forms() {
    let world = World::new();
    let root = world.root.display().to_string();
    let absolute = format!("write_file(/{root}/a/**)");
    let allow = [absolute.as_str(), "read_file(~/notes.md)"];
    let check = Check::new(
        &world,
        CaseRules {
            allow: &allow,
            ..Default::default()
        },
    );
    assert_eq!(
        check.outcome("write_file", json!({ "path": "a/x/y.txt", "content": "" })),
        "allow"
    );
    assert_eq!(
        check.outcome("write_file", json!({ "path": "a", "content": "" })),
        "allow",
        "dir/** covers dir"
    );
    assert_eq!(
        check.outcome("write_file", json!({ "path": "secrets/x", "content": "" })),
        "ask"
    );
    assert_eq!(
        check.outcome("read_file", json!({ "path": "/home/user/notes.md" })),
        "allow"
    );
    assert_eq!(
        check.outcome("read_file", json!({ "path": "/home/other/notes.md" })),
        "ask"
    );

    let unanchored = Check::new(
        &world,
        CaseRules {
            allow: &["read_file(*.md)"],
            ..Default::default()
        },
    );
    assert_eq!(
        unanchored.outcome("read_file", json!({ "path": "../outside/x.md" })),
        "ask",
        "an unanchored allow stays under the cwd"
    );
}

#[test]
fn argument_rules_match_top_level_strings() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            deny: &["deploy(env=prod*)"],
            allow: &["deploy(env=staging)"],
            ..Default::default()
        },
    );
    assert_eq!(
        check.outcome("deploy", json!({ "env": "production" })),
        "deny"
    );
    assert_eq!(
        check.outcome("deploy", json!({ "env": "staging" })),
        "allow"
    );
    assert_eq!(check.outcome("deploy", json!({ "env": "dev" })), "ask");
    assert_eq!(check.outcome("deploy", json!({ "env": 5 })), "ask");
}

#[test]
fn tool_patterns_cover_the_tools_they_name() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            deny: &["mcp__fs__write_file"],
            allow: &["mcp__fs__*", "mcp__db__*(query=select *)"],
            ..Default::default()
        },
    );
    assert_eq!(
        check.outcome("mcp__fs__read_file", json!({"path": "/etc/passwd"})),
        "allow"
    );
    assert_eq!(
        check.outcome("mcp__fs__write_file", json!({"path": "x"})),
        "deny",
        "a deny of one tool beats an allow of its server's pattern"
    );
    assert_eq!(
        check.outcome("mcp__fs2__read_file", json!({})),
        "ask",
        "mcp__fs__* is not mcp__fs2__*"
    );
    assert_eq!(
        check.outcome("mcp__db__run", json!({"query": "select 1"})),
        "allow"
    );
    assert_eq!(
        check.outcome("mcp__db__run", json!({"query": "drop table t"})),
        "ask"
    );

    // A bare pattern covers every tool it names, builtins too.
    let everything = Check::new(
        &world,
        CaseRules {
            deny: &["*"],
            ..Default::default()
        },
    );
    assert_eq!(
        everything.outcome("read_file", json!({"path": "a"})),
        "deny"
    );
    assert_eq!(everything.command("ls"), "deny");
    assert_eq!(everything.outcome("mcp__x__y", json!({})), "deny");
}

/// A pattern's argument is matched as a string: it must never stand in for the judging of a
/// builtin's paths or command line, where a string match would let `..`, a symlink or a second
/// command through an allow.
#[test]
fn a_pattern_with_an_argument_never_covers_a_tool_judged_by_path_or_command() {
    let world = World::new();
    let outside = world.outside.join("file");
    let check = Check::new(
        &world,
        CaseRules {
            allow: &["*(path=*)", "*(command=*)", "*_file(*)"],
            ..Default::default()
        },
    );
    assert_eq!(
        check.outcome("write_file", json!({"path": outside, "content": "x"})),
        "ask"
    );
    assert_eq!(
        check.outcome("read_file", json!({"path": outside})),
        "ask",
        "outside the roots, a read asks"
    );
    assert_eq!(check.command("rm -rf /tmp/x"), "ask");
    assert_eq!(
        check.outcome("deploy", json!({"path": "anything"})),
        "allow",
        "a tool judged by name is covered"
    );

    // Neither does a deny pattern with an argument weaken a builtin's judging: the builtin
    // is left to its own rules, and the lint says so.
    let builtins: Vec<ToolDefinition> = crate::tools::builtins()
        .iter()
        .map(|tool| tool.definition())
        .collect();
    let home = Path::new("/home/user");
    let reason = lint::never_matches("*_file(path=/etc/*)", &builtins, None, home).unwrap();
    assert!(reason.contains("never covers read_file"), "{reason}");
    assert_eq!(
        lint::never_matches("mcp__fs__*", &builtins, None, home),
        None
    );
    assert_eq!(lint::never_matches("*", &builtins, None, home), None);
    assert_eq!(
        lint::never_matches("mcp__db__*(query=x)", &builtins, None, home),
        None
    );
    assert!(
        lint::never_matches("mcp__fs__*/x", &builtins, None, home)
            .is_some_and(|reason| reason.contains("no tool name can match")),
    );
    assert_eq!(
        lint::names_an_unknown_tool("mcp__fs__*", &builtins, home),
        None,
        "a pattern may cover tools that register later"
    );
}

#[test]
fn bad_rules_are_refused_with_the_rule_named() {
    let cwd = Path::new("/p");
    let home = Path::new("/h");
    assert_eq!(
        Rule::parse("  ", cwd, home).unwrap_err(),
        RuleError::Empty("  ".into())
    );
    assert_eq!(
        Rule::parse("(x)", cwd, home).unwrap_err(),
        RuleError::NoTool("(x)".into())
    );
    assert_eq!(
        Rule::parse("read_file(x", cwd, home).unwrap_err(),
        RuleError::Unclosed("read_file(x".into())
    );
    let bad_glob = Rule::parse("read_file(a[)", cwd, home).unwrap_err();
    assert!(bad_glob.to_string().contains("read_file(a[)"), "{bad_glob}");
    assert_eq!(
        Rule::parse("run_command(FOO=1 make)", cwd, home)
            .unwrap()
            .text(),
        "run_command(FOO=1 make)"
    );
}

/// The bypass classes, as decisions: each line ran something or touched a file no rule
/// allowed before the engine judged what bash does with it. The effects are checked end to end
/// in `tests/tests/bypass_classes/`.
#[test]
fn what_bash_does_beyond_the_words_is_never_allowed_by_words() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            allow: &[
                "run_command(echo *)",
                "run_command(git status)",
                "run_command(cd *)",
                "run_command(git push *)",
            ],
            deny: &["run_command(rm *)", "run_command(git push --force*)"],
            ..Default::default()
        },
    );
    for asked in [
        // `~user`, `~+`, `~-` and `~N` are other directories, whatever their spelling.
        "echo x >> ~root/f",
        "echo x > ~+/f",
        "echo x > ~-/f",
        "echo x > ~1/f",
        "echo x &> ~nobody/f",
        "echo x > {~root,}/f",
        // Bash ends a tilde prefix at a colon too (`~:f` is `$HOME:f`, beside the home
        // directory), and expands a `~` after `=` or `:` in a word shaped like an assignment.
        "echo x > ~:f",
        "echo x >~:f",
        "echo x > ~root:f",
        "echo x > ~:~/f",
        "echo x > a=~/f",
        "echo x > a=b:~/f",
        "echo x a=~/f > g",
        "echo x > a+=~/f",
        "echo x > a[1]=~/f",
        "echo x > _=~/f",
        // Wrapper options the analysis does not know, and `env -S`, a command line.
        "env -S 'touch P' echo hi",
        "env --split-string='touch P' echo hi",
        "env -S'touch P' echo hi",
        "env -iS'touch P' echo hi",
        "env --frobnicate echo hi",
        "nice --bogus echo hi",
        "timeout --kill-after=1 --bogus 5 echo hi",
        // `xargs` takes its command's arguments from its input.
        "xargs echo < list",
        "xargs -a list echo",
        // Relative paths after the directory changed.
        "cd /elsewhere && echo x > f",
        "cd .. ; echo x > f",
        "pushd /tmp; echo x > f",
        "echo x > f; cd /tmp; echo y > f",
        // Brace expansion makes other words than it shows.
        "{touch,} P",
        "echo a; {id,}",
        "echo hi > {/tmp/y,}",
        "mkdir -p src/{a,b}",
        // `$'…'` is decoded by bash.
        "echo hi > $'\\x2e\\x2e/x'",
        "$'\\x74ouch' P",
        // Descriptor duplication to a computed target.
        "echo hi >& $x",
    ] {
        assert_eq!(check.command(asked), "ask", "{asked:?}");
    }
    for denied in [
        "{rm,} -f x",
        "$'\\x72m' -f x",
        "env -S 'rm -f x' echo hi",
        "git push {--force,origin}",
        "git push --forc{e..e} origin",
        "echo a; r{m,} x",
    ] {
        assert_eq!(check.command(denied), "deny", "{denied:?}");
    }
    for allowed in ["echo x > ~/f-in-home-is-outside-but-judged", "echo {a,b}"] {
        // `~` alone is the home (outside the roots here: asks); `echo {a,b}` is two words
        // of echo, but still a brace expansion: asks too.
        assert_eq!(check.command(allowed), "ask", "{allowed:?}");
    }
    assert_eq!(check.command("cd /elsewhere && echo x"), "allow");
    // Text order is not run order (a loop runs the redirection again after the `cd`): in a
    // line that changes the directory, a relative path is opaque wherever it is.
    assert_eq!(check.command("echo x > ./out.txt; cd /tmp"), "ask");
    assert_eq!(
        check.command("echo x > /abs/in-root-or-not; cd /tmp"),
        "ask"
    );
    assert_eq!(
        check.command(&format!(
            "echo x > {}/out.txt; cd /tmp",
            world.root.display()
        )),
        "allow"
    );
}

/// A call's `env` counts as leading `NAME=value` words: allow rules must cover them, deny
/// rules see them, and a grant records them.
#[test]
fn the_env_argument_is_part_of_the_command() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(git status)", "run_command(LANG=C make *)"],
            deny: &["run_command(GIT_CONFIG_COUNT=* *)"],
            ..Default::default()
        },
    );
    let with_env = |line: &str, env: Value| json!({"command": line, "env": env});
    assert_eq!(
        check.outcome("run_command", with_env("git status", json!({}))),
        "allow"
    );
    assert_eq!(
        check.outcome(
            "run_command",
            with_env("git status", json!({"PATH": "/tmp/evil:/usr/bin"}))
        ),
        "ask"
    );
    assert_eq!(
        check.outcome(
            "run_command",
            with_env(
                "git status",
                json!({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor"})
            )
        ),
        "deny"
    );
    assert_eq!(
        check.outcome("run_command", with_env("make all", json!({"LANG": "C"}))),
        "allow"
    );
    match check.decide(
        "run_command",
        with_env("git status", json!({"B": "x y", "A": "it's"})),
    ) {
        Decision::Ask { suggestion, .. } => assert_eq!(
            suggestion, r#"run_command(git status) with env {"A":"it's","B":"x y"}"#,
            "the env after the line, as JSON: no value reads as part of the line"
        ),
        other => panic!("{other:?}"),
    }
    let mut granted = Check::new(&world, CaseRules::default());
    granted.grants = vec![r#"run_command(git status) with env {"PATH":"/x"}"#.to_owned()];
    assert_eq!(
        granted.outcome("run_command", with_env("git status", json!({"PATH": "/x"}))),
        "allow"
    );
    assert_eq!(
        granted.outcome("run_command", with_env("git status", json!({"PATH": "/y"}))),
        "ask"
    );
    // Without the env the grant is not what decides (the known-safe list does).
    assert_ne!(
        granted
            .judge("run_command", json!({"command": "git status"}))
            .step,
        Step::Grant
    );
    // An assignment in the line reaches its own command only; the call's env every command:
    // the grant of one never covers the other.
    granted.grants = vec!["run_command(PATH=/x true; git status)".to_owned()];
    assert_eq!(
        granted.outcome(
            "run_command",
            with_env("true; git status", json!({"PATH": "/x"}))
        ),
        "ask"
    );
    granted.grants = vec![r#"run_command(true; git status) with env {"PATH":"/x"}"#.to_owned()];
    assert_eq!(granted.command("PATH=/x true; git status"), "ask");
}

/// What a line reads (`<`, `<>`, `$(< f)`, `xargs -a f`) is judged as `read_file` would be.
#[test]
fn reads_by_redirection_are_judged_against_read_deny_rules() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(echo *)", "run_command(cat *)"],
            deny: &["read_file(secrets/**)", "read_file(.env)"],
            ..Default::default()
        },
    );
    for denied in [
        "echo hi < secrets/x",
        "echo hi <> secrets/x",
        "cat < ./secrets/../secrets/x",
        "cat < .env",
        "xargs -a secrets/x echo",
        "xargs --arg-file=.env echo",
        "echo \"$(< secrets/x)\"",
        "cat 0< secrets/x",
    ] {
        assert_eq!(check.command(denied), "deny", "{denied:?}");
    }
    assert_eq!(check.command("cat < a/readme"), "allow");
    // The deny rule is named as the reason.
    match check.decide("run_command", json!({"command": "echo hi < secrets/x"})) {
        Decision::Deny(reason) => assert!(reason.contains("read_file(secrets/**)"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A symlink to the secret is judged by where it points.
    symlink(world.root.join("secrets/x"), world.root.join("a/link")).unwrap();
    assert_eq!(check.command("cat < a/link"), "deny");
}

/// Writing git's config or hooks makes code run at the next `git status`: it asks in every
/// mode but bypass, whatever allows the call otherwise.
#[test]
fn files_that_make_code_run_later_ask_in_every_mode_but_bypass() {
    let world = World::new();
    std::fs::create_dir_all(world.root.join(".git/hooks")).unwrap();
    let write = |path: &str| json!({"path": path, "content": "x"});
    for mode in [Mode::Default, Mode::AcceptEdits, Mode::DontAsk] {
        let check = Check::new(
            &world,
            CaseRules {
                allow: &["run_command(echo *)", "write_file(**)"],
                ..Default::default()
            },
        )
        .mode(mode);
        let expected = if mode == Mode::DontAsk { "deny" } else { "ask" };
        for line in [
            "echo x >> .git/config",
            "echo x > .git/hooks/pre-commit",
            "echo x > ./.git/config.worktree",
            "echo x > .git/modules/sub/config",
            "echo x > .git/hooks/../config",
            "echo x > bare.git/hooks/post-update",
            "echo x > .git",
            "echo ../evil > .git/commondir",
            "echo ../evil > .git/worktrees/w/commondir",
            "echo /x > .git/worktrees/w/gitdir",
            "echo 'ref: refs/heads/main' > a/HEAD",
            "echo x > .git/HEAD",
        ] {
            assert_eq!(check.command(line), expected, "{line:?} in {mode:?}");
        }
        for path in [
            ".git/config",
            ".git/hooks/post-checkout",
            "./x/../.git/config",
            "fake/HEAD",
        ] {
            assert_eq!(
                check.outcome("write_file", write(path)),
                expected,
                "{path} in {mode:?}"
            );
        }
        assert_eq!(check.command("echo x > notes.git.txt"), "allow");
        assert_eq!(check.outcome("write_file", write("src/config")), "allow");
    }
    let bypass = Check::new(&world, CaseRules::default()).mode(Mode::Bypass);
    assert_eq!(bypass.outcome("write_file", write(".git/config")), "allow");
    // An allow rule that names the git directory opens it; a grant of the exact call too.
    let named = Check::new(
        &world,
        CaseRules {
            allow: &["write_file(.git/hooks/**)"],
            ..Default::default()
        },
    );
    assert_eq!(
        named.outcome("write_file", write(".git/hooks/pre-push")),
        "allow"
    );
    assert_eq!(named.outcome("write_file", write(".git/config")), "ask");
    let mut granted = Check::new(&world, CaseRules::default());
    granted.grants = vec!["run_command(echo x >> .git/config)".to_owned()];
    assert_eq!(granted.command("echo x >> .git/config"), "allow");
    // A `.git` file names the git directory elsewhere (a worktree, a submodule): its config
    // and hooks are protected there too, under any name.
    let worktree = World::new();
    std::fs::create_dir_all(worktree.root.join("a/gitdir/hooks")).unwrap();
    let gitdir = worktree.root.join("a/gitdir");
    std::fs::write(
        worktree.root.join(".git"),
        format!("gitdir: {}\n", gitdir.display()),
    )
    .unwrap();
    let check = Check::new(
        &worktree,
        CaseRules {
            allow: &["run_command(echo *)"],
            ..Default::default()
        },
    );
    assert_eq!(check.command("echo x > a/gitdir/config"), "ask");
    assert_eq!(check.command("echo x > a/gitdir/hooks/pre-commit"), "ask");
    assert_eq!(check.command("echo x > a/gitdir/description"), "allow");
}

#[test]
fn deny_rules_of_reading_tools_hide_files_and_subtrees_from_walks() {
    let world = World::new();
    let rules = RuleStrings {
        deny: strings(&[
            "read_file(secrets/**)",
            "read_file(.env)",
            "search_code(private/**)",
            "find_files(build)",
            "write_file(docs/**)",
            "run_command(rm *)",
            "lookup(q=*)",
        ]),
        ..RuleStrings::default()
    };
    let policy = Policy::compile([&rules], &world.root, &world.root).unwrap();
    let at = |relative: &str| world.root.join(relative);
    let search = policy.hidden_from_walks("search_code").unwrap();
    let find = policy.hidden_from_walks("find_files").unwrap();
    for walk in [&search, &find] {
        for hidden in [
            "secrets",
            "secrets/x",
            "secrets/deep/er",
            ".env",
            "a/b/.env",
            "private",
            "private/notes",
        ] {
            assert!(walk.hides(&at(hidden)), "{hidden}");
        }
        for shown in [
            "src/main.rs",
            "secretsx",
            ".envrc",
            "privately/x",
            "docs/a.md",
        ] {
            assert!(!walk.hides(&at(shown)), "{shown}");
        }
    }
    // A tool's own deny rules hide from its own walk only.
    assert!(find.hides(&at("build")) && find.hides(&at("x/build")));
    assert!(!search.hides(&at("build")));
    // Anything else hides nothing; no rule that hides, nothing to pay.
    let quiet = RuleStrings {
        deny: strings(&["write_file(secrets/**)", "run_command(cat *)"]),
        ..RuleStrings::default()
    };
    let quiet = Policy::compile([&quiet], &world.root, &world.root).unwrap();
    assert!(quiet.hidden_from_walks("search_code").is_none());
    // `deny read_file` without a path hides every file.
    let everything = RuleStrings {
        deny: strings(&["read_file"]),
        ..RuleStrings::default()
    };
    let everything = Policy::compile([&everything], &world.root, &world.root).unwrap();
    assert!(
        everything
            .hidden_from_walks("find_files")
            .unwrap()
            .hides(&at("any/file"))
    );
}

#[test]
fn writes_by_redirection_are_judged_against_write_and_edit_rules() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(echo *)", "run_command(true)"],
            ask: &["write_file(a/**)"],
            deny: &["write_file(secrets/**)", "edit_file(.env)"],
        },
    );
    for denied in [
        "echo hi > secrets/x",
        "echo hi >> ./secrets/../secrets/new",
        "true > .env",
        "echo hi &> .env",
        "echo hi 2>| secrets/x",
        "env time -o secrets/t echo",
    ] {
        assert_eq!(check.command(denied), "deny", "{denied:?}");
    }
    match check.decide("run_command", json!({"command": "true > .env"})) {
        Decision::Deny(reason) => assert!(
            reason.contains("edit_file(.env)") && reason.contains("writes"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(check.command("echo hi > a/notes"), "ask");
    assert_eq!(check.command("echo hi > notes"), "allow");
    // A symlink to a protected file is judged by where it points.
    symlink(world.root.join("secrets/x"), world.root.join("link")).unwrap();
    assert_eq!(check.command("echo hi > link"), "deny");
}

#[test]
fn edit_file_is_judged_against_read_deny_rules_as_it_reads() {
    let world = World::new();
    let check = Check::new(
        &world,
        CaseRules {
            deny: &["read_file(secrets/**)", "read_file(.env)"],
            ..Default::default()
        },
    )
    .mode(Mode::AcceptEdits);
    let edit = |path: &str| json!({"path": path, "old_string": "a", "new_string": "b"});
    for path in [".env", "secrets/x", "./a/../secrets/x"] {
        assert_eq!(check.outcome("edit_file", edit(path)), "deny", "{path}");
    }
    symlink(world.root.join(".env"), world.root.join("a/envlink")).unwrap();
    assert_eq!(check.outcome("edit_file", edit("a/envlink")), "deny");
    assert_eq!(check.outcome("edit_file", edit("a/readme")), "allow");
    // Writing without reading stays a write: accept_edits writes it.
    assert_eq!(
        check.outcome("write_file", json!({"path": ".env", "content": "x"})),
        "allow"
    );
}

/// The `cwd` argument of `run_command` is part of what a rule or a grant covers: a command
/// that runs outside the roots asks whatever its words, and a grant covers its directory only.
#[test]
fn the_cwd_argument_is_part_of_the_command() {
    let world = World::new();
    let mut check = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(echo *)", "run_command(rm -rf build)"],
            ..Default::default()
        },
    );
    let at = |line: &str, cwd: &str| json!({"command": line, "cwd": cwd});
    let outside = world.outside.display().to_string();
    for cwd in [outside.as_str(), "..", "../outside", "/", "a/../.."] {
        assert_eq!(
            check.outcome("run_command", at("rm -rf build", cwd)),
            "ask",
            "{cwd}"
        );
        assert_eq!(
            check.outcome("run_command", at("echo x", cwd)),
            "ask",
            "{cwd}"
        );
    }
    // A link inside the roots that leads out is outside.
    symlink(&world.outside, world.root.join("a/out")).unwrap();
    assert_eq!(check.outcome("run_command", at("echo x", "a/out")), "ask");
    for cwd in ["a", ".", world.root.to_str().unwrap()] {
        assert_eq!(
            check.outcome("run_command", at("rm -rf build", cwd)),
            "allow",
            "{cwd}"
        );
    }

    // A grant records the directory; the same line elsewhere is not covered.
    let mut granting = Check::new(&world, CaseRules::default());
    let Decision::Ask { suggestion, .. } = granting.decide("run_command", at("make", "a")) else {
        panic!("make should ask");
    };
    assert_eq!(
        suggestion,
        format!("run_command(cd {}/a && make)", world.root.display())
    );
    granting.grants = vec![suggestion, "run_command(make)".to_owned()];
    assert_eq!(granting.outcome("run_command", at("make", "a")), "allow");
    assert_eq!(granting.outcome("run_command", at("make", &outside)), "ask");
    // A grant of exactly the call outside covers it (as a grant of a path outside does).
    check.grants = vec![format!("run_command(cd {outside} && echo x)")];
    assert_eq!(
        check.outcome("run_command", at("echo x", &outside)),
        "allow"
    );
    assert_eq!(check.outcome("run_command", at("echo y", &outside)), "ask");
}

/// A line that runs code no rule can look into (a shell reading its commands from a pipe, a
/// redirection or a here-document of unknown text, an interpreter reading its program so,
/// `bash -c "$x"`) asks; next to a deny rule of `run_command` it is denied, in every mode,
/// whatever an allow rule or the mode says — the hidden code could be what the rule forbids.
#[test]
fn code_hidden_from_the_rules_asks_and_a_deny_rule_denies_it() {
    let world = World::new();
    let hidden = [
        "echo rm a.txt | bash",
        "bash <<< \"rm $f\"",
        "sh -s < f",
        "bash /dev/stdin < f",
        "python3 - < script.py",
        "cat x | perl",
        "x=$(cat f); bash -c \"$x\"",
    ];
    let guarded = CaseRules {
        deny: &["run_command(rm *)"],
        allow: &["run_command"],
        ..Default::default()
    };
    for mode in [Mode::Default, Mode::AcceptEdits, Mode::Bypass] {
        let check = Check::new(&world, guarded).mode(mode);
        for line in hidden {
            assert_eq!(check.command(line), "deny", "{mode:?}: {line}");
        }
        // Known text is looked into: the rule matches what it runs, or nothing.
        assert_eq!(check.command("bash <<< 'rm a.txt'"), "deny", "{mode:?}");
        assert_eq!(check.command("bash <<< 'ls'"), "allow", "{mode:?}");
        assert_eq!(check.command("bash script.sh"), "allow", "{mode:?}");
    }
    let Decision::Deny(reason) = Check::new(&world, guarded)
        .decide("run_command", json!({"command": "echo rm a.txt | bash"}))
    else {
        panic!("not denied");
    };
    assert!(
        reason.contains("run_command(rm *)") && reason.contains("`bash` reading its commands"),
        "{reason}"
    );
    // Without a deny rule it could hide from, it asks, as any opaque line does.
    let open = CaseRules {
        allow: &["run_command(bash *)", "run_command(echo *)"],
        ..Default::default()
    };
    for line in hidden {
        assert_eq!(Check::new(&world, open).command(line), "ask", "{line}");
    }
}

#[test]
fn a_command_the_sandbox_confines_runs_unasked_after_every_rule_and_mode() {
    let world = World::new();
    let outside = world.outside.display().to_string();
    let command = |line: &str| json!({ "command": line });
    let confined = Check::new(&world, CaseRules::default()).confined();
    for line in [
        "rm -rf build",
        "cargo test",
        "npm install",
        "echo $(date) > out.txt",
        "mkdir -p a/b && touch a/b/c",
    ] {
        let judgment = confined.judge("run_command", command(line));
        assert_eq!(
            (judgment.decision, judgment.step, judgment.rule),
            (Decision::Allow, Step::Sandboxed, None),
            "{line}"
        );
    }
    // Where the sandbox does not confine the session's commands, or the config says so, the
    // same line asks as any the rules leave open.
    let open = Check::new(&world, CaseRules::default());
    assert_eq!(
        open.judge("run_command", command("rm -rf build")).step,
        Step::DefaultAsk
    );
    let mut asked = Check::new(&world, CaseRules::default()).confined();
    asked.sandboxed_commands = SandboxedCommands::Ask;
    assert_eq!(
        asked.judge("run_command", command("rm -rf build")).step,
        Step::DefaultAsk
    );
    // Only `run_command`: a file tool is judged by the rules and the mode, as before.
    let write = json!({ "path": "a/x", "content": "" });
    assert_eq!(confined.judge("write_file", write).step, Step::DefaultAsk);

    // Deny and ask rules, hooks, plan mode and the protected paths all come first.
    let rules = CaseRules {
        deny: &["run_command(rm *)"],
        ask: &["run_command(git push *)"],
        ..CaseRules::default()
    };
    let ruled = Check::new(&world, rules).confined();
    assert_eq!(
        ruled.judge("run_command", command("rm -rf build")).step,
        Step::DenyRule
    );
    assert_eq!(
        ruled
            .judge("run_command", command("git push origin main"))
            .step,
        Step::AskRule
    );
    let mut hooked = Check::new(&world, CaseRules::default()).confined();
    hooked.hook = HookVerdict::Ask;
    assert_eq!(
        hooked.judge("run_command", command("ls")).step,
        Step::HookAsk
    );
    let plan = Check::new(&world, CaseRules::default())
        .confined()
        .mode(Mode::Plan);
    assert_eq!(
        plan.judge("run_command", command("ls")).step,
        Step::PlanMode
    );
    assert_eq!(
        confined
            .judge("run_command", command("echo x > .git/config"))
            .step,
        Step::ProtectedPath
    );
    // A command run elsewhere than the roots is another command.
    let elsewhere = json!({ "command": "ls", "cwd": outside });
    assert_eq!(
        confined.judge("run_command", elsewhere).step,
        Step::DefaultAsk
    );
    // A line the rules cannot read asks in every mode.
    assert_eq!(
        confined
            .judge("run_command", command("echo 'unterminated"))
            .step,
        Step::UnreadableCommand
    );
}

#[test]
fn beside_a_command_rule_of_run_command_a_confined_line_asks_naming_it() {
    let world = World::new();
    let command = |line: &str| json!({ "command": line });
    // A command run unasked could sidestep the rule (a script, an interpreter, a function, a
    // word the shell expands): every line the rules leave open asks, plain ones too.
    for (rules, rule) in [
        (
            CaseRules {
                ask: &["run_command(git push *)"],
                ..CaseRules::default()
            },
            "run_command(git push *)",
        ),
        (
            CaseRules {
                deny: &["run_command(rm *)"],
                ..CaseRules::default()
            },
            "run_command(rm *)",
        ),
    ] {
        let ruled = Check::new(&world, rules).confined();
        for line in [
            "touch new.txt",
            "$(echo git) push origin",
            "x=rm; $x -rf victim",
            "git $X push origin main",
            "printf 'git push\\n' > s.sh; sh s.sh",
            "f(){ git \"$@\"; }; f push",
        ] {
            let judgment = ruled.judge("run_command", command(line));
            assert!(
                matches!(judgment.decision, Decision::Ask { .. }),
                "{rule}: {line}"
            );
            assert_eq!(judgment.step, Step::DefaultAsk, "{rule}: {line}");
            assert_eq!(
                judgment.rule.map(|rule| rule.text),
                Some(rule.to_owned()),
                "{line}"
            );
        }
    }
    // Code read from the input beside a deny rule is denied, sandbox or not.
    let denying = Check::new(
        &world,
        CaseRules {
            deny: &["run_command(rm *)"],
            ..CaseRules::default()
        },
    )
    .confined();
    assert_eq!(
        denying
            .judge("run_command", command("echo rm x | bash"))
            .step,
        Step::DenyRule
    );
    // An allow rule still decides what it covers.
    let allowed = Check::new(
        &world,
        CaseRules {
            allow: &["run_command(ls *)"],
            ask: &["run_command(git push *)"],
            ..CaseRules::default()
        },
    )
    .confined();
    assert_eq!(
        allowed.judge("run_command", command("ls -la")).step,
        Step::AllowRule
    );
    // Without such a rule nothing is hidden from anyone: the sandbox bounds the line.
    let open = Check::new(&world, CaseRules::default()).confined();
    assert_eq!(
        open.judge("run_command", command("$(echo git) status"))
            .step,
        Step::Sandboxed
    );
    // An ask rule of a file tool sees nothing a command line hides.
    let file_rule = CaseRules {
        ask: &["read_file(secrets/**)"],
        ..CaseRules::default()
    };
    let filed = Check::new(&world, file_rule).confined();
    assert_eq!(
        filed
            .judge("run_command", command("$(echo cat) notes.txt"))
            .step,
        Step::Sandboxed
    );
    // What it covers of a command line, it still asks for: a read by redirection.
    assert_eq!(
        filed
            .judge("run_command", command("wc -l < secrets/x"))
            .step,
        Step::AskRule
    );
}

/// "Allow for this session" grants a command's program and subcommand, read back as an allow
/// rule; a wrapper, an assignment, a path, a shell or several commands keep an exact grant.
#[test]
fn session_grants_widen_to_program_and_subcommand_only_where_nothing_else_can_run() {
    let world = World::new();
    let env = world.env();
    let grant_of = |line: &str| {
        let arguments = json!({ "command": line }).as_object().unwrap().clone();
        let analysed = AnalysedLine::here(line);
        let facts = command_facts("run_command", &arguments, &env, Some(&analysed)).unwrap();
        super::session_grant(&CallFacts {
            tool: "run_command",
            safety: Safety::SideEffect,
            system: false,
            arguments: &arguments,
            paths: &[],
            command: Some(&facts),
            hook: HookVerdict::Silent,
        })
    };
    assert_eq!(grant_of("git log -1"), "pattern run_command(git log *)");
    assert_eq!(
        grant_of("cargo test --release"),
        "pattern run_command(cargo test *)"
    );
    assert_eq!(
        grant_of("npm run test -- --watch"),
        "pattern run_command(npm run test *)"
    );
    for exact in [
        "timeout 5 cargo test",
        "FOO=1 git log",
        "/usr/bin/git log",
        "bash -c 'git log'",
        "git -c core.pager=x log",
        "git log; git status",
        "make test",
        "npx jest",
        "find . -exec rm {} +",
        "xargs git log",
    ] {
        assert_eq!(grant_of(exact), format!("run_command({exact})"), "{exact}");
    }
    let mut granted = Check::new(&world, CaseRules::default());
    granted.grants = vec!["pattern run_command(git log *)".to_owned()];
    let judged = granted.judge("run_command", json!({"command": "git log -2 --stat"}));
    assert_eq!(judged.step, Step::Grant);
    assert_eq!(
        judged.rule.map(|rule| rule.text),
        Some("run_command(git log *)".to_owned())
    );
    for not_covered in ["git push", "git log -1; rm -rf x", "bash -c 'git log'"] {
        assert_ne!(
            granted
                .judge("run_command", json!({ "command": not_covered }))
                .step,
            Step::Grant,
            "{not_covered}"
        );
    }
}

/// No accepted rule is inert: for every form a rule can be written in (toold's and Claude
/// Code's; commands, paths, arguments by any spelling, tool patterns), generated, a deny rule
/// the lint accepts denies each call it reads as covering, and none it reads as not covering.
mod no_rule_is_inert {
    use proptest::prelude::*;

    use super::*;

    /// A rule and calls (tool, arguments) it must and must not match.
    #[derive(Debug, Clone)]
    struct Case {
        rule: String,
        matching: Vec<(String, Value)>,
        other: Vec<(String, Value)>,
    }

    fn run(line: &str) -> (String, Value) {
        ("run_command".to_owned(), json!({ "command": line }))
    }

    fn read(path: &str) -> (String, Value) {
        ("read_file".to_owned(), json!({ "path": path }))
    }

    /// A word no program, builtin or reserved word of bash is (each starts `zq`): the engine
    /// reads some programs (shells, interpreters, wrappers) and words (`do`, `eval`) otherwise
    /// than as a command of words, rightly, and the property is about rules, not those.
    fn word() -> impl Strategy<Value = String> {
        "zq[a-z0-9]{0,4}"
    }

    fn cases() -> impl Strategy<Value = Case> {
        let prefix = (word(), word(), word(), any::<bool>()).prop_map(|(a, b, c, claude)| Case {
            rule: if claude {
                format!("Bash({a} {b}:*)")
            } else {
                format!("run_command({a} {b} *)")
            },
            matching: vec![
                run(&format!("{a} {b}")),
                run(&format!("{a} {b} {c}")),
                run(&format!("cd . && {a} {b} -x {c}")),
            ],
            other: vec![run(&format!("{a}x {b}")), run(&format!("{a} {b}x {c}"))],
        });
        let exact = (word(), word()).prop_map(|(a, b)| Case {
            rule: format!("run_command({a} {b})"),
            matching: vec![run(&format!("{a} {b}")), run(&format!("{a}  '{b}'"))],
            other: vec![run(&format!("{a} {b} more")), run(&a)],
        });
        // The file's name never equals the directory's: a bare name matches at any depth.
        let directory = (word(), word(), 0..4usize).prop_map(|(dir, file, form)| {
            let file = format!("f{file}");
            let rule = match form {
                0 => format!("read_file(./{dir}/**)"),
                1 => format!("Read(./{dir}/**)"),
                2 => format!("read_file({dir})"),
                _ => format!("read_file(path={dir}/)"),
            };
            Case {
                rule,
                matching: vec![
                    read(&format!("{dir}/{file}")),
                    read(&format!("./{dir}/sub/{file}.txt")),
                ],
                other: vec![
                    read(&format!("{dir}x/{file}")),
                    read(&format!("x{dir}/{file}")),
                ],
            }
        });
        let argument = (
            prop_oneof![
                Just("name".to_owned()),
                Just("fileName".to_owned()),
                Just("file-name".to_owned()),
                Just("URL".to_owned())
            ],
            word(),
            word(),
        )
            .prop_map(|(name, value, rest)| Case {
                rule: format!("lookup({name}={value}*)"),
                matching: vec![
                    ("lookup".to_owned(), json!({ name.clone(): value.clone() })),
                    (
                        "lookup".to_owned(),
                        json!({ name.clone(): format!("{value}{rest}"), "other": 1 }),
                    ),
                ],
                other: vec![
                    (
                        "lookup".to_owned(),
                        json!({ name.clone(): format!("Z{value}") }),
                    ),
                    ("lookup".to_owned(), json!({ "else": value.clone() })),
                    ("other_tool".to_owned(), json!({ name: value })),
                ],
            });
        let server = (word(), word(), any::<bool>()).prop_map(|(server, tool, claude)| {
            let server = format!("s{server}");
            Case {
                rule: if claude {
                    format!("mcp__{server}")
                } else {
                    format!("mcp__{server}__*")
                },
                matching: vec![(format!("mcp__{server}__{tool}"), json!({}))],
                other: vec![
                    (format!("mcp__{server}x__{tool}"), json!({})),
                    (format!("mcp__x{server}__{tool}"), json!({})),
                ],
            }
        });
        prop_oneof![prefix, exact, directory, argument, server]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn an_accepted_rule_matches_what_it_reads_as(case in cases()) {
            let world = World::new();
            let home = Path::new("/home/user");
            let accepted = lint::never_matches(&case.rule, &[], Some(&world.root), home);
            prop_assert!(accepted.is_none(), "{} refused: {accepted:?}", case.rule);
            let deny = [case.rule.as_str()];
            let check = Check::new(&world, CaseRules { deny: &deny, ..Default::default() });
            for (tool, arguments) in &case.matching {
                prop_assert_eq!(
                    check.outcome(tool, arguments.clone()), "deny",
                    "{} must deny {} {}", case.rule, tool, arguments
                );
            }
            for (tool, arguments) in &case.other {
                prop_assert_ne!(
                    check.outcome(tool, arguments.clone()), "deny",
                    "{} must not deny {} {}", case.rule, tool, arguments
                );
            }
        }
    }

    #[test]
    fn forms_that_would_match_nothing_are_refused() {
        let home = Path::new("/home/user");
        let builtins: Vec<ToolDefinition> = crate::tools::builtins()
            .iter()
            .map(|tool| tool.definition())
            .collect();
        for rule in [
            "run_command(rm  *)",
            "run_command(rm\t*)",
            "Bash(git  push:*)",
            "read_file(Path=secrets/**)",
            "Read(PATH=secrets)",
        ] {
            assert!(
                lint::never_matches(rule, &builtins, None, home).is_some(),
                "{rule} is accepted"
            );
        }
    }
}
