//! The configuration file: defaults, every key read, each kind of bad value refused naming its
//! key, every fault of a file reported in file order (and as `check-config --json` gives
//! them), and the example files in `config/` and the TOML examples of README.md checking
//! without an error or a warning.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pretty_assertions::assert_eq;
use toold::config::{Config, ConfigError, check_config};
use toold::env::{Env, defaults};
use toold::mcp::{McpTransport, Start, Trust};
use toold::pipeline::Limits;
use toold_protocol::{HookEvent, Rules};

/// The path errors name in these tests.
const PATH: &str = "/etc/toold-test.toml";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new(PATH))
}

/// The one-line error for `text`, which must be refused.
fn refusal(text: &str) -> String {
    match parse(text) {
        Ok(config) => panic!("accepted {text:?} as {config:?}"),
        Err(error) => error.to_string(),
    }
}

/// Each input with the error it must give, path stripped for readability.
fn check_refusals(cases: &[(&str, &str)]) {
    for (text, expected) in cases {
        let message = refusal(text);
        let shown = message.strip_prefix(PATH).unwrap_or(&message);
        assert_eq!(shown, *expected, "for {text:?}");
    }
}

#[test]
fn no_file_means_every_default() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_file_or_default(&dir.path().join("config.toml")).unwrap();
    assert_eq!(config.source, None);
    assert_eq!(config.socket, None);
    assert_eq!(config.max_message_bytes, 16 * 1024 * 1024);
    assert_eq!(config.max_connections, 256);
    assert_eq!(
        config.session_idle_ttl,
        Some(Duration::from_secs(7 * 24 * 3600))
    );
    assert!(!config.allow_bypass);
    assert_eq!(config.rules.rules, Rules::default());
    assert!(config.hooks.is_empty());

    // The limits and the Env are the ones the daemon uses without a config.
    let limits = config.limits();
    let built_in = Limits::default();
    assert_eq!(limits.max_parallel, built_in.max_parallel);
    assert_eq!(limits.max_stream_bytes, built_in.max_stream_bytes);
    assert_eq!(limits.approval_timeout, built_in.approval_timeout);
    assert_eq!(limits.hook_timeout, built_in.hook_timeout);
    assert_eq!(config.env_for("/work"), Env::new("/work"));
    assert_eq!(config.timeout_ms, defaults::TIMEOUT_MS);
}

#[test]
fn an_empty_file_is_every_default() {
    let config = parse("# nothing set\n").unwrap();
    assert_eq!(config.source, Some(PathBuf::from(PATH)));
    assert_eq!(config.summary(), Config::default().summary());
    assert!(
        config
            .summary()
            .starts_with("every setting has its default")
    );
}

#[test]
fn a_full_file_sets_every_key() {
    let config = parse(
        r#"
socket = "/run/user/1000/toold/other.sock"
max_message_bytes = 1_048_576
max_connections = 16
max_parallel = 2
max_stream_bytes = 0
timeout_ms = 5000
max_command_timeout_ms = 1000
max_output_bytes = 4096
max_read_bytes = 0x10000
session_idle_ttl = "30m"
approval_timeout_ms = 60000
hook_timeout_ms = 2000
allow_bypass = true

[permissions]
allow = ["read_file", "run_command(cargo test *)"]
ask = ["write_file(//etc/**)"]
deny = ["run_command(rm -rf *)", "read_file(~/.ssh/**)"]

[[hooks.pre_tool_use]]
matcher = "run_command|write_file"
command = ["/usr/local/bin/guard", "--strict"]
timeout_ms = 500

[[hooks.post_tool_use]]
command = ["logger"]
"#,
    )
    .unwrap();

    assert_eq!(
        config.socket,
        Some(PathBuf::from("/run/user/1000/toold/other.sock"))
    );
    assert_eq!(config.max_message_bytes, 1_048_576);
    assert_eq!(config.max_connections, 16);
    assert_eq!(config.session_idle_ttl, Some(Duration::from_secs(1800)));
    assert!(config.allow_bypass);

    let limits = config.limits();
    assert_eq!(limits.max_parallel, 2);
    assert_eq!(limits.max_stream_bytes, 0);
    assert_eq!(limits.approval_timeout, Duration::from_secs(60));
    assert_eq!(limits.hook_timeout, Duration::from_secs(2));

    let env = config.env_for("/work");
    assert_eq!(env.cwd, PathBuf::from("/work"));
    assert_eq!(env.roots, vec![PathBuf::from("/work")]);
    assert_eq!(
        (
            env.timeout_ms,
            env.max_command_timeout_ms,
            env.max_output_bytes,
            env.max_read_bytes
        ),
        (5000, 1000, 4096, 65536)
    );

    assert_eq!(
        config.rules.rules,
        Rules {
            allow: vec!["read_file".into(), "run_command(cargo test *)".into()],
            ask: vec!["write_file(//etc/**)".into()],
            deny: vec![
                "run_command(rm -rf *)".into(),
                "read_file(~/.ssh/**)".into()
            ],
        }
    );

    let [pre, post] = config.hooks.as_slice() else {
        panic!("expected two hooks, got {:?}", config.hooks);
    };
    assert_eq!(pre.event, HookEvent::PreToolUse);
    assert_eq!(pre.command, ["/usr/local/bin/guard", "--strict"]);
    assert_eq!(pre.timeout, Some(Duration::from_millis(500)));
    assert_eq!(post.event, HookEvent::PostToolUse);
    assert!(post.matcher.is_none());
    assert_eq!(post.timeout, None);
}

#[test]
fn a_matcher_must_match_the_whole_tool_name() {
    let config = parse(
        "[[hooks.pre_tool_use]]\nmatcher = \"run_command|write_file\"\ncommand = [\"x\"]\n\
         [[hooks.pre_tool_use]]\nmatcher = \"read\"\ncommand = [\"x\"]\n\
         [[hooks.pre_tool_use]]\nmatcher = \".*_file\"\ncommand = [\"x\"]\n",
    )
    .unwrap();
    let matches =
        |index: usize, tool: &str| config.hooks[index].matcher.as_ref().unwrap().is_match(tool);
    assert!(matches(0, "run_command"));
    assert!(matches(0, "write_file"));
    assert!(!matches(0, "run_command_v2"));
    assert!(!matches(0, "my_write_file"));
    assert!(!matches(1, "read_file"));
    assert!(matches(2, "read_file"));
    assert!(!matches(2, "search_code"));
}

#[test]
fn hooks_keep_their_file_order() {
    let config = parse(
        "[[hooks.pre_tool_use]]\ncommand = [\"first\"]\n\
         [[hooks.post_tool_use]]\ncommand = [\"post\"]\n\
         [[hooks.pre_tool_use]]\ncommand = [\"second\"]\n",
    )
    .unwrap();
    let pre: Vec<&str> = config
        .hooks
        .iter()
        .filter(|hook| hook.event == HookEvent::PreToolUse)
        .map(|hook| hook.command[0].as_str())
        .collect();
    assert_eq!(pre, ["first", "second"]);
}

#[test]
fn durations_take_seconds_or_a_unit() {
    let ttl = |value: &str| {
        parse(&format!("session_idle_ttl = {value}"))
            .unwrap()
            .session_idle_ttl
    };
    let seconds = |n| Some(Duration::from_secs(n));
    assert_eq!(ttl("90"), seconds(90));
    assert_eq!(ttl("\"90s\""), seconds(90));
    assert_eq!(ttl("\"30m\""), seconds(1800));
    assert_eq!(ttl("\"24h\""), seconds(86_400));
    assert_eq!(ttl("\"7d\""), seconds(604_800));
    assert_eq!(ttl("\"365d\""), seconds(365 * 86_400));
    // Zero turns expiry off.
    assert_eq!(ttl("0"), None);
    assert_eq!(ttl("\"0s\""), None);
    assert_eq!(ttl("\"0d\""), None);
}

#[test]
fn bad_durations_are_refused() {
    check_refusals(&[
        (
            "session_idle_ttl = \"7w\"",
            ":1:20: session_idle_ttl: invalid duration \"7w\": expected a whole number and a unit \
             (s, m, h or d), as in \"90s\", \"30m\", \"24h\", \"7d\"",
        ),
        (
            "session_idle_ttl = \"90\"",
            ":1:20: session_idle_ttl: invalid duration \"90\": expected a whole number and a unit \
             (s, m, h or d), as in \"90s\", \"30m\", \"24h\", \"7d\"",
        ),
        (
            "session_idle_ttl = \"400d\"",
            ":1:20: session_idle_ttl: must be at most 365d, got 400d; 0 keeps sessions until \
             they are closed",
        ),
        (
            "session_idle_ttl = 31536001",
            ":1:20: session_idle_ttl: must be at most 365d, got 31536001s; 0 keeps sessions \
             until they are closed",
        ),
        (
            "session_idle_ttl = -5",
            ":1:20: session_idle_ttl: must be at least 0, got -5",
        ),
        (
            "session_idle_ttl = 1.5",
            ":1:20: session_idle_ttl: expected a duration (\"90s\", \"30m\", \"24h\", \"7d\"), \
             found a float",
        ),
    ]);
}

#[test]
fn bad_values_name_their_key() {
    check_refusals(&[
        (
            "max_parallel = 0",
            ":1:16: max_parallel: must be at least 1, got 0",
        ),
        (
            "max_parallel = 5000",
            ":1:16: max_parallel: must be at most 1024, got 5000",
        ),
        (
            "max_connections = 0",
            ":1:19: max_connections: must be at least 1, got 0",
        ),
        (
            "max_message_bytes = 512",
            ":1:21: max_message_bytes: must be at least 1024 (1 KiB), got 512",
        ),
        (
            "max_message_bytes = 2147483648",
            ":1:21: max_message_bytes: must be at most 1073741824 (1 GiB), got 2147483648",
        ),
        (
            "max_message_bytes = 99999999999999999999999",
            ":1:21: max_message_bytes: must be at most 1073741824 (1 GiB), got \
             99999999999999999999999",
        ),
        (
            "max_output_bytes = -1",
            ":1:20: max_output_bytes: must be at least 1, got -1",
        ),
        (
            "max_read_bytes = 0",
            ":1:18: max_read_bytes: must be at least 1, got 0",
        ),
        (
            "timeout_ms = 0",
            ":1:14: timeout_ms: must be at least 1, got 0",
        ),
        (
            "max_command_timeout_ms = 0",
            ":1:26: max_command_timeout_ms: must be at least 1, got 0",
        ),
        (
            "approval_timeout_ms = 86400001",
            ":1:23: approval_timeout_ms: must be at most 86400000 (1 d), got 86400001",
        ),
        (
            "hook_timeout_ms = 0",
            ":1:19: hook_timeout_ms: must be at least 1, got 0",
        ),
        // Wrong types.
        (
            "timeout_ms = \"120s\"",
            ":1:14: timeout_ms: expected an integer, found a string",
        ),
        (
            "timeout_ms = 1.5",
            ":1:14: timeout_ms: expected an integer, found a float",
        ),
        (
            "allow_bypass = \"yes\"",
            ":1:16: allow_bypass: expected true or false, found a string",
        ),
        (
            "socket = 5",
            ":1:10: socket: expected a string, found an integer",
        ),
        (
            "permissions = 3",
            ":1:15: permissions: expected a table, found an integer",
        ),
        (
            "hooks = []",
            ":1:9: hooks: expected a table, found an array",
        ),
        // The socket.
        (
            "socket = \"run/toold.sock\"",
            ":1:10: socket: must be an absolute path, got \"run/toold.sock\"",
        ),
        (
            "socket = \"/\"",
            ":1:10: socket: must name a file, got \"/\"",
        ),
        (
            &format!("socket = \"/{}\"", "s".repeat(120)),
            ":1:10: socket: is longer than 107 bytes, the most a Unix socket path may have",
        ),
    ]);
}

#[test]
fn bad_rules_name_the_rule_and_why() {
    check_refusals(&[
        (
            "[permissions]\nallow = [\"read_file\", \"run_command(ls\"]",
            ":2:23: permissions.allow[1]: invalid rule: rule \"run_command(ls\" does not end \
             with ')'",
        ),
        (
            "[permissions]\ndeny = [\"(x)\"]",
            ":2:9: permissions.deny[0]: invalid rule: rule \"(x)\" has no tool name before its '('",
        ),
        (
            "[permissions]\nask = [\"  \"]",
            ":2:8: permissions.ask[0]: invalid rule: rule \"  \" is empty",
        ),
        (
            "[permissions]\nallow = \"read_file\"",
            ":2:9: permissions.allow: expected an array of rule strings, found a string",
        ),
        (
            "[permissions]\nallow = [1]",
            ":2:10: permissions.allow[0]: expected a string, found an integer",
        ),
    ]);
}

#[test]
fn bad_hooks_name_the_hook_and_why() {
    check_refusals(&[
        (
            "[[hooks.pre_tool_use]]\ncommand = [\"/bin/true\"]\n\n\
             [[hooks.pre_tool_use]]\nmatcher = \"(\"\ncommand = [\"x\"]",
            ":5:11: hooks.pre_tool_use[1].matcher: invalid regex: unclosed group",
        ),
        (
            "[[hooks.pre_tool_use]]\nmatcher = \"*\"\ncommand = [\"x\"]",
            ":2:11: hooks.pre_tool_use[0].matcher: invalid regex: repetition operator missing \
             expression; leave `matcher` out to match every tool",
        ),
        (
            "[[hooks.pre_tool_use]]\nmatcher = \"\"\ncommand = [\"x\"]",
            ":2:11: hooks.pre_tool_use[0].matcher: is empty, which matches no tool; leave \
             `matcher` out to match every tool",
        ),
        (
            "[[hooks.pre_tool_use]]\nmatcher = \"run_command\"",
            ":1:1: hooks.pre_tool_use[0]: missing `command`, the program to run and its \
             arguments, as in command = [\"/path/to/program\", \"--flag\"]",
        ),
        (
            "[[hooks.post_tool_use]]\ncommand = []",
            ":2:11: hooks.post_tool_use[0].command: is empty; it needs at least the program to run",
        ),
        (
            "[[hooks.post_tool_use]]\ncommand = [\"\", \"x\"]",
            ":2:11: hooks.post_tool_use[0].command: starts with an empty program name",
        ),
        (
            "[[hooks.post_tool_use]]\ncommand = \"/bin/guard --strict\"",
            ":2:11: hooks.post_tool_use[0].command: expected an array of strings (the program and \
             its arguments, run without a shell), found a string",
        ),
        (
            "hooks = { pre_tool_use = [{ command = [\"x\", 3] }] }",
            ":1:45: hooks.pre_tool_use[0].command[1]: expected a string, found an integer",
        ),
        (
            "[[hooks.pre_tool_use]]\ncommand = [\"x\"]\ntimeout_ms = 0",
            ":3:14: hooks.pre_tool_use[0].timeout_ms: must be at least 1, got 0",
        ),
        (
            "[hooks]\npre_tool_use = 3",
            ":2:16: hooks.pre_tool_use: expected an array of hook tables ([[hooks.pre_tool_use]]), \
             found an integer",
        ),
    ]);
}

#[test]
fn unknown_keys_are_refused_at_every_level() {
    check_refusals(&[
        (
            "max_paralel = 3",
            ":1:1: max_paralel: unknown key; did you mean `max_parallel`?",
        ),
        (
            "colour = \"blue\"",
            ":1:1: colour: unknown key; the keys here are socket, max_message_bytes, \
             max_connections, max_parallel, max_stream_bytes, timeout_ms, max_command_timeout_ms, \
             max_output_bytes, max_read_bytes, session_idle_ttl, approval_timeout_ms, \
             hook_timeout_ms, frame_timeout_ms, allow_bypass, audit, audit_max_bytes, audit_keep, permissions, hooks, sandbox, index, mcp",
        ),
        (
            "[permissions]\nallow = []\nalow = []",
            ":3:1: permissions.alow: unknown key; did you mean `allow`?",
        ),
        (
            "[permissions.allow]\nread_file = true",
            ":1:1: permissions.allow: expected an array of rule strings, found a table",
        ),
        (
            "[[hooks.pre_tol_use]]\ncommand = [\"x\"]",
            ":1:9: hooks.pre_tol_use: unknown key; did you mean `pre_tool_use`?",
        ),
        (
            "[[hooks.post_tool_use]]\ncommand = [\"x\"]\ntimeout = 5",
            ":3:1: hooks.post_tool_use[0].timeout: unknown key; the keys here are matcher, \
             command, timeout_ms",
        ),
        (
            "[hooks]\n\"on error\" = []",
            ":2:1: hooks.\"on error\": unknown key; the keys here are pre_tool_use, post_tool_use",
        ),
    ]);
}

#[test]
fn the_index_is_read_with_every_key_and_bad_values_refused() {
    let config = parse(
        "[index]\nenabled = false\nmax_memory_mib = 64\nidle_evict = \"10m\"\n\
         retry_after = 30\nmax_watches = 1000\n",
    )
    .expect("valid");
    assert!(!config.index.enabled);
    assert_eq!(config.index.max_memory_bytes, 64 * 1024 * 1024);
    assert_eq!(config.index.idle_evict, Duration::from_secs(600));
    assert_eq!(config.index.retry_after, Duration::from_secs(30));
    assert_eq!(config.index.max_watches, 1000);
    let defaults = parse("").expect("empty").index;
    assert!(defaults.enabled);
    assert_eq!(defaults.max_memory_bytes, 256 * 1024 * 1024);
    assert_eq!(defaults.idle_evict, Duration::from_secs(30 * 60));
    check_refusals(&[
        (
            "[index]\nmax_memory_mib = 0",
            ":2:18: index.max_memory_mib: must be at least 1, got 0",
        ),
        (
            "[index]\nidle_evict = \"0s\"",
            ":2:14: index.idle_evict: must be at least 1s",
        ),
        (
            "[index]\nenable = true",
            ":2:1: index.enable: unknown key; did you mean `enabled`?",
        ),
        (
            "[index]\nenabled = \"yes\"",
            ":2:11: index.enabled: expected true or false, found a string",
        ),
    ]);
}

#[test]
fn mcp_servers_are_read_with_every_key() {
    let config = parse(
        r#"
[mcp.servers.fs]
command = "npx"
args = ["--offline", "@modelcontextprotocol/server-filesystem", "~/src"]
env = { LOG_LEVEL = "warn" }
cwd = "/srv/src"
trust = "trusted"
start = "lazy"
startup_timeout_ms = 5000
tool_timeout_ms = 60000
enabled_tools = ["read_*", "list_directory"]
disabled_tools = ["read_media_file"]

[mcp.servers.remote]
url = "http://127.0.0.1:3001/mcp"
headers = { "X-Team" = "a" }
bearer_token_env = "REMOTE_TOKEN"

[mcp.servers.off]
command = "never-started"
enabled = false
"#,
    )
    .unwrap();
    let names: Vec<&str> = config
        .mcp_servers
        .iter()
        .map(|server| server.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["fs", "remote"],
        "file order; `enabled = false` left out"
    );

    let fs = &config.mcp_servers[0];
    assert_eq!(
        fs.transport,
        McpTransport::Stdio {
            command: "npx".into(),
            args: vec![
                "--offline".into(),
                "@modelcontextprotocol/server-filesystem".into(),
                "~/src".into()
            ],
            env: [("LOG_LEVEL".to_owned(), "warn".to_owned())].into(),
            cwd: Some(PathBuf::from("/srv/src")),
        }
    );
    assert_eq!(fs.trust, Trust::Trusted);
    assert_eq!(fs.start, Start::Lazy);
    assert_eq!(fs.startup_timeout, Duration::from_millis(5000));
    assert_eq!(fs.tool_timeout, Duration::from_millis(60000));
    assert!(fs.tools.admits("fs", "read_text_file"));
    assert!(fs.tools.admits("fs", "list_directory"));
    assert!(!fs.tools.admits("fs", "read_media_file"));
    assert!(!fs.tools.admits("fs", "write_file"));

    let remote = &config.mcp_servers[1];
    assert_eq!(
        remote.transport,
        McpTransport::Http {
            url: "http://127.0.0.1:3001/mcp".into(),
            headers: [("X-Team".to_owned(), "a".to_owned())].into(),
            bearer_token_env: Some("REMOTE_TOKEN".into()),
        }
    );
    // The defaults docs/protocol.md section 11.9 gives.
    assert_eq!(remote.trust, Trust::Untrusted);
    assert_eq!(remote.start, Start::Eager);
    assert_eq!(remote.startup_timeout, Duration::from_secs(30));
    assert_eq!(remote.tool_timeout, Duration::from_secs(120));
    assert!(remote.tools.admits("remote", "anything"));

    let summary = config.summary();
    assert!(
        summary.contains("MCP servers: 2\n  fs: stdio (npx), trusted, lazy, tools [\"read_*\", \"list_directory\"] but not [\"read_media_file\"]\n  remote: http (http://127.0.0.1:3001/mcp), untrusted, eager"),
        "{summary}"
    );
    assert!(Config::default().summary().contains("MCP servers: none"));
}

#[test]
fn bad_mcp_servers_are_refused_naming_the_key() {
    check_refusals(&[
        (
            "[mcp.servers.my_fs]\ncommand = \"x\"",
            ":1:14: mcp.servers.my_fs: \"my_fs\" is not a valid server name: lowercase \
             letters, digits and `-`, starting with a letter or digit, at most 32 (no `_`: tools \
             are named mcp__NAME__TOOL)",
        ),
        (
            "[mcp.servers.Fs]\ncommand = \"x\"",
            ":1:14: mcp.servers.Fs: \"Fs\" is not a valid server name: lowercase letters, \
             digits and `-`, starting with a letter or digit, at most 32 (no `_`: tools are \
             named mcp__NAME__TOOL)",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\nurl = \"http://h/mcp\"",
            ":1:14: mcp.servers.fs: has both `command` and `url`: a server is either started \
             (command) or reached over HTTP (url)",
        ),
        (
            "[mcp.servers.fs]\ntrust = \"trusted\"",
            ":1:14: mcp.servers.fs: has neither `command` (a program to start) nor `url` (a \
             streamable HTTP endpoint)",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\nheaders = { A = \"b\" }",
            ":3:1: mcp.servers.fs.headers: `headers` is for a server with `url`; this one has \
             `command`",
        ),
        (
            "[mcp.servers.fs]\nurl = \"http://h/mcp\"\nargs = [\"a\"]",
            ":3:1: mcp.servers.fs.args: `args` is for a server with `command`; this one has \
             `url`",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\ncomand = \"y\"",
            ":3:1: mcp.servers.fs.comand: unknown key; did you mean `command`?",
        ),
        (
            "[mcp.server.fs]\ncommand = \"x\"",
            ":1:6: mcp.server: unknown key; did you mean `servers`?",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"\"",
            ":2:11: mcp.servers.fs.command: is empty; it names the program to run",
        ),
        (
            "[mcp.servers.fs]\ncommand = [\"npx\"]",
            ":2:11: mcp.servers.fs.command: expected a string, found an array",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\nargs = \"-y\"",
            ":3:8: mcp.servers.fs.args: expected an array of strings, found a string",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\nenv = { A = 1 }",
            ":3:13: mcp.servers.fs.env.A: expected a string (the environment variable's \
             value), found an integer",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\ncwd = \"src\"",
            ":3:7: mcp.servers.fs.cwd: \"src\" is not an absolute path (or one that starts \
             with ~/)",
        ),
        (
            "[mcp.servers.fs]\nurl = \"ftp://h/mcp\"",
            ":2:7: mcp.servers.fs.url: \"ftp://h/mcp\" is not an http:// or https:// URL \
             with a host, as in \"http://127.0.0.1:3001/mcp\"",
        ),
        (
            "[mcp.servers.fs]\nurl = \"http:///mcp\"",
            ":2:7: mcp.servers.fs.url: \"http:///mcp\" is not an http:// or https:// URL \
             with a host, as in \"http://127.0.0.1:3001/mcp\"",
        ),
        (
            "[mcp.servers.fs]\nurl = \"http://h/mcp\"\nbearer_token_env = \"MY TOKEN\"",
            ":3:20: mcp.servers.fs.bearer_token_env: \"MY TOKEN\" is not an environment \
             variable name (letters, digits and `_`, not starting with a digit)",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\ntrust = \"yes\"",
            ":3:9: mcp.servers.fs.trust: unknown value \"yes\": expected \"untrusted\" or \
             \"trusted\"",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\nstart = \"now\"",
            ":3:9: mcp.servers.fs.start: unknown value \"now\": expected \"eager\" or \"lazy\"",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\ntool_timeout_ms = 0",
            ":3:19: mcp.servers.fs.tool_timeout_ms: must be at least 1, got 0",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\ndisabled_tools = [\"ok\", \"[\"]",
            ":3:25: mcp.servers.fs.disabled_tools[1]: invalid glob: unclosed character class; \
             missing ']'",
        ),
        (
            "[mcp.servers.fs]\ncommand = \"x\"\nenabled = \"no\"",
            ":3:11: mcp.servers.fs.enabled: expected true or false, found a string",
        ),
    ]);
}

#[test]
fn every_problem_in_the_file_is_reported_in_file_order() {
    let text = "timeout_ms = 0\nmax_parallel = 0\nbogus = 1\n\n[sandbox]\nmode = \"nope\"\n\n\
                [permissions]\nallow = [\"run_command(\", \"read_file\", 3]\n";
    let error = parse(text).unwrap_err();
    let shown: Vec<String> = error
        .all()
        .map(|fault| {
            let (line, column) = fault.line_column.expect("a place");
            format!(
                "{line}:{column} {}: {}",
                fault.key.as_deref().unwrap_or("-"),
                fault.reason
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            "1:14 timeout_ms: must be at least 1, got 0",
            "2:16 max_parallel: must be at least 1, got 0",
            "3:1 bogus: unknown key; the keys here are socket, max_message_bytes, \
             max_connections, max_parallel, max_stream_bytes, timeout_ms, \
             max_command_timeout_ms, max_output_bytes, max_read_bytes, session_idle_ttl, \
             approval_timeout_ms, hook_timeout_ms, frame_timeout_ms, allow_bypass, audit, \
             audit_max_bytes, audit_keep, permissions, hooks, sandbox, index, mcp",
            "6:8 sandbox.mode: unknown mode \"nope\": expected \"workspace_write\", \
             \"read_only\" or \"off\"",
            "9:10 permissions.allow[0]: invalid rule: rule \"run_command(\" does not end with ')'",
            "9:39 permissions.allow[2]: expected a string, found an integer",
        ]
    );
    // The message has one line per fault, the first as a single fault was always shown.
    let message = error.to_string();
    assert_eq!(message.lines().count(), 6, "{message}");
    assert!(
        message.starts_with(&format!("{PATH}:1:14: timeout_ms: ")),
        "{message}"
    );
    // A key refused is reported as itself, not again as missing.
    let error = parse("[[hooks.pre_tool_use]]\ncommand = []\n").unwrap_err();
    assert_eq!(error.all().count(), 1, "{error}");
    let error = parse("[mcp.servers.fs]\ncommand = 3\n").unwrap_err();
    assert_eq!(error.all().count(), 1, "{error}");
}

#[test]
fn check_config_json_reports_every_error_or_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "timeout_ms = 0\nbogus = 1\n[sandbox]\nnetwork = \"yes\"\n",
    )
    .unwrap();
    let report = toold::config::check_config_json(Some(&bad));
    assert_eq!(report["file"], bad.display().to_string());
    assert_eq!(report["valid"], false);
    assert_eq!(report["warnings"], serde_json::json!([]));
    assert_eq!(report["summary"], serde_json::Value::Null);
    let errors = report["errors"].as_array().expect("errors");
    let places: Vec<(u64, u64, &str)> = errors
        .iter()
        .map(|error| {
            assert!(error["reason"].as_str().is_some_and(|r| !r.is_empty()));
            (
                error["line"].as_u64().unwrap(),
                error["column"].as_u64().unwrap(),
                error["key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        places,
        [
            (1, 14, "timeout_ms"),
            (2, 1, "bogus"),
            (4, 11, "sandbox.network")
        ]
    );

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "max_parallel = 4\n[permissions]\nallow = [\"bogus_tool\"]\n",
    )
    .unwrap();
    let report = toold::config::check_config_json(Some(&good));
    assert_eq!(report["valid"], true);
    assert_eq!(report["errors"], serde_json::json!([]));
    assert_eq!(report["warnings"][0]["key"], "permissions.allow[0]");
    assert_eq!(report["warnings"][0]["line"], 3);
    assert!(
        report["summary"]
            .as_str()
            .is_some_and(|summary| summary.contains("max_parallel = 4")),
        "{report}"
    );

    // A file that is not there: the whole file at fault, no line, column or key.
    let report = toold::config::check_config_json(Some(&dir.path().join("nope.toml")));
    assert_eq!(report["valid"], false);
    assert_eq!(
        report["errors"],
        serde_json::json!([{"line": null, "column": null, "key": null, "reason": "no such file"}])
    );
}

#[test]
fn toml_syntax_errors_give_line_and_column() {
    check_refusals(&[
        (
            "a = ",
            ":1:5: invalid TOML: string values must be quoted, expected literal string",
        ),
        (
            "timeout_ms = 1\ntimeout_ms = 2",
            ":2:1: invalid TOML: duplicate key",
        ),
    ]);
}

#[test]
fn an_error_carries_path_key_and_reason() {
    let error = parse("\n\n[permissions]\ndeny = [\"run_command(\"]").unwrap_err();
    assert_eq!(error.path, PathBuf::from(PATH));
    assert_eq!(error.key.as_deref(), Some("permissions.deny[0]"));
    assert_eq!(error.line_column, Some((4, 9)));
    assert_eq!(
        error.reason,
        "invalid rule: rule \"run_command(\" does not end with ')'"
    );
}

#[test]
fn an_explicit_file_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let error = Config::load(Some(&missing)).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("{}: no such file", missing.display())
    );
    assert_eq!(error.key, None);
    assert_eq!(check_config(Some(&missing)).unwrap_err(), error);
}

#[test]
fn unreadable_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = Config::from_file_or_default(dir.path()).unwrap_err();
    assert!(error.reason.starts_with("cannot read it: "), "{error}");

    let binary = dir.path().join("binary.toml");
    std::fs::write(&binary, b"timeout_ms = 1\xff\n").unwrap();
    assert_eq!(
        Config::from_file(&binary).unwrap_err().reason,
        "not UTF-8 text"
    );

    let huge = dir.path().join("huge.toml");
    std::fs::write(&huge, "# padding\n".repeat(200_000)).unwrap();
    assert_eq!(
        Config::from_file(&huge).unwrap_err().reason,
        "larger than 1 MiB, too large for a config file"
    );
}

#[test]
fn check_config_summarises_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        "max_parallel = 4\nsession_idle_ttl = 0\n\n[permissions]\ndeny = [\"run_command(rm *)\"]\n\
         allow = [\"read_file\", \"find_files\"]\n\n[[hooks.pre_tool_use]]\ncommand = [\"guard\"]\n",
    )
    .unwrap();
    let summary = check_config(Some(&path)).unwrap();
    assert_eq!(
        summary,
        format!(
            "{}: valid\n\
             settings that differ from their defaults:\n  \
             max_parallel = 4 (default 8)\n  \
             session_idle_ttl = \"0s\" (default \"7d\")\n\
             permission rules: 2 allow, 0 ask, 1 deny; commands the sandbox confines run unasked\n\
             hooks: 1 pre_tool_use, 0 post_tool_use\n\
             sandbox: mode workspace_write, network off, on_unsupported warn\n\
             MCP servers: none",
            path.display()
        )
    );

    std::fs::write(&path, "").unwrap();
    let summary = check_config(Some(&path)).unwrap();
    assert!(
        summary.contains("every setting has its default"),
        "{summary}"
    );
}

#[test]
fn check_config_refuses_rules_that_can_never_match_and_warns_of_doubtful_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let at = |line: usize, column: usize, key: &str| {
        format!("{}:{line}:{column}: {key}:", path.display())
    };
    // Rules that can never match: refused, every one of them, each at its place.
    std::fs::write(
        &path,
        "[permissions]\n\
         deny = [\"READ_FILE(secrets/**)\", \"run_command(rm *)\"]\n\
         allow = [\"Run_Command(ls)\"]\n",
    )
    .unwrap();
    let error = check_config(Some(&path)).expect_err("never-matching rules are refused");
    let text = error.to_string();
    for (place, wanted) in [
        (
            at(2, 9, "permissions.deny[0]"),
            "can never match: no tool is named \"READ_FILE\" (names are exact); did you mean \"read_file\"",
        ),
        (
            at(3, 10, "permissions.allow[0]"),
            "did you mean \"run_command\"",
        ),
    ] {
        assert!(
            text.contains(&place) && text.contains(wanted),
            "{place} {wanted}: {text}"
        );
    }
    // Rules that may well be meant: accepted, with a warning.
    std::fs::write(
        &path,
        "[permissions]\n\
         deny = [\"read_file(secrets/)\",\n  \"read_file(/etc/hostname)\", \"run_command(rm *)\"]\n\
         allow = [\"deploy_tool\", \"read_file(//etc/hostname)\"]\n",
    )
    .unwrap();
    let report = check_config(Some(&path)).unwrap();
    let warnings: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("warning: "))
        .collect();
    for (place, wanted) in [
        (
            at(3, 3, "permissions.deny[1]"),
            "relative to the directory of this file; for the absolute path write \"//etc/hostname\"",
        ),
        (
            at(4, 10, "permissions.allow[0]"),
            "no builtin tool is named \"deploy_tool\"",
        ),
    ] {
        assert!(
            warnings
                .iter()
                .any(|warning| warning.contains(&place) && warning.contains(wanted)),
            "{place} {wanted}: {report}"
        );
    }
    // `read_file(secrets/)` covers what is inside, as in a gitignore file: no warning.
    assert_eq!(warnings.len(), 2, "{report}");
    assert!(
        report.contains(": valid"),
        "warnings do not refuse the file: {report}"
    );
}

#[test]
fn every_example_config_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .extension()
            .is_some_and(|extension| extension == "toml")
        {
            match Config::from_file(&path) {
                Ok(config) => assert!(config.warnings.is_empty(), "{:?}", config.warnings),
                Err(error) => panic!("{error}"),
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "no .toml file in {}", dir.display());
}

/// The line that marks a TOML block of README.md that is not a toold config (another
/// program's), put on the line before its fence.
const NOT_TOOLD_CONFIG: &str = "<!-- not toold's config";

/// README.md's ```toml blocks with the line each starts on, those marked `NOT_TOOLD_CONFIG`
/// left out.
fn readme_toml_blocks() -> Vec<(usize, String)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut at = 0;
    while at < lines.len() {
        let fence = lines[at].trim_start();
        if fence != "```toml" {
            at += 1;
            continue;
        }
        let indent = lines[at].len() - fence.len();
        let marked = at > 0 && lines[at - 1].trim_start().starts_with(NOT_TOOLD_CONFIG);
        let start = at + 1;
        let mut end = start;
        while end < lines.len() && lines[end].trim() != "```" {
            end += 1;
        }
        assert!(
            end < lines.len(),
            "README.md:{start}: a ```toml block is not closed"
        );
        if !marked {
            let text: Vec<&str> = lines[start..end]
                .iter()
                .map(|line| line.get(indent..).unwrap_or(""))
                .collect();
            blocks.push((start + 1, text.join("\n")));
        }
        at = end + 1;
    }
    blocks
}

#[test]
fn the_readme_and_shipped_configs_check_without_error_or_warning() {
    let blocks = readme_toml_blocks();
    assert!(
        blocks.len() >= 2,
        "README.md has its MCP and hooks examples"
    );
    for (line, text) in blocks {
        let path = PathBuf::from(format!("README.md block at line {line}"));
        match Config::from_toml(&text, &path) {
            Ok(config) => assert!(
                config.warnings.is_empty(),
                "README.md:{line}: warnings: {:?}",
                config.warnings
            ),
            Err(error) => panic!("README.md:{line}: {error}"),
        }
    }
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/toold.toml");
    let report = check_config(Some(&shipped)).unwrap_or_else(|error| panic!("{error}"));
    assert!(!report.contains("warning:"), "{report}");
}

#[test]
fn the_annotated_example_lists_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/toold.toml");
    let example = Config::from_file(&path).unwrap();
    assert_eq!(example.summary(), Config::default().summary());
    let text = std::fs::read_to_string(&path).unwrap();
    for key in [
        "socket",
        "max_message_bytes",
        "max_connections",
        "max_parallel",
        "max_stream_bytes",
        "timeout_ms",
        "max_command_timeout_ms",
        "max_output_bytes",
        "max_read_bytes",
        "session_idle_ttl",
        "approval_timeout_ms",
        "hook_timeout_ms",
        "allow_bypass",
        "[permissions]",
        "[[hooks.pre_tool_use]]",
        "[[hooks.post_tool_use]]",
        "[sandbox]",
        "writable",
        "on_unsupported",
        "allow_unsandboxed",
    ] {
        assert!(
            text.contains(key),
            "config/toold.toml does not mention {key}"
        );
    }
}

#[test]
fn the_sandbox_section_is_checked_key_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let refused = |text: &str| {
        std::fs::write(&path, text).unwrap();
        let error = check_config(Some(&path)).unwrap_err().to_string();
        error
            .strip_prefix(&path.display().to_string())
            .unwrap_or(&error)
            .to_owned()
    };
    for (text, error) in [
        (
            "[sandbox]\nmode = \"strict\"",
            ":2:8: sandbox.mode: unknown mode \"strict\": expected \"workspace_write\", \"read_only\" or \"off\"",
        ),
        (
            "[sandbox]\nnetwork = \"no\"",
            ":2:11: sandbox.network: expected true or false, found a string",
        ),
        (
            "[sandbox]\nwritable = [\"cache\"]",
            ":2:13: sandbox.writable[0]: \"cache\" is not an absolute path (or one that starts with ~/)",
        ),
        (
            "[sandbox]\non_unsupported = \"ignore\"",
            ":2:18: sandbox.on_unsupported: unknown value \"ignore\": expected \"warn\" or \"refuse\"",
        ),
        (
            "[sandbox]\nallow_unsandbox = true",
            ":2:1: sandbox.allow_unsandbox: unknown key; did you mean `allow_unsandboxed`?",
        ),
    ] {
        assert_eq!(refused(text), error, "for {text:?}");
    }
    let cache = dir.path().join("cache");
    std::fs::write(
        &path,
        format!(
            "[sandbox]\nmode = \"read_only\"\nnetwork = false\nwritable = [{:?}, \"~/.cargo/registry\"]\n\
             on_unsupported = \"refuse\"\nallow_unsandboxed = true\n",
            cache.display()
        ),
    )
    .unwrap();
    let summary = check_config(Some(&path)).unwrap();
    assert!(
        summary.contains(&format!(
            "sandbox: mode read_only, network off, also writable: {}, ",
            cache.display()
        )),
        "{summary}"
    );
    assert!(
        summary.contains("on_unsupported refuse, sessions may loosen it"),
        "{summary}"
    );
    // A writable directory that does not exist yet is a warning, not an error.
    assert!(
        summary.contains(&format!(
            "warning: {}:4:13: sandbox.writable[0]: {} is not an existing directory",
            path.display(),
            cache.display()
        )),
        "{summary}"
    );
}
