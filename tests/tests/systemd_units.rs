//! The systemd user units in `systemd/` carry the settings the daemon relies on: the socket's
//! path, modes and descriptor name, and the service's notify type, reload command, watchdog,
//! kill mode and restart policy; the hardening a per-user executor allows, and none of the
//! options that would break its sandbox or the commands it runs.

use std::path::PathBuf;

use toold_tests::daemon::TestDaemon;

/// A unit file as (section, key, value) triples, in order; comments and blank lines dropped.
fn parse_unit(name: &str) -> Vec<(String, String, String)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../systemd")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let mut section = String::new();
    let mut entries = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
        {
            section = name.to_owned();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{name}:{}: not `key=value`: {line}", number + 1));
        assert!(
            !section.is_empty(),
            "{name}:{}: a key outside any section",
            number + 1
        );
        entries.push((
            section.clone(),
            key.trim().to_owned(),
            value.trim().to_owned(),
        ));
    }
    entries
}

/// The value of `key` in `section`, which must appear exactly once.
fn value<'a>(unit: &'a [(String, String, String)], section: &str, key: &str) -> &'a str {
    let values: Vec<&str> = unit
        .iter()
        .filter(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v.as_str())
        .collect();
    assert_eq!(
        values.len(),
        1,
        "[{section}] {key}= should appear once: {values:?}"
    );
    values[0]
}

#[test]
fn the_socket_unit_listens_privately_on_the_default_path() {
    let unit = parse_unit("toold.socket");
    assert_eq!(
        value(&unit, "Socket", "ListenStream"),
        "%t/toold/toold.sock"
    );
    assert_eq!(value(&unit, "Socket", "SocketMode"), "0600");
    assert_eq!(value(&unit, "Socket", "DirectoryMode"), "0700");
    assert_eq!(
        value(&unit, "Socket", "FileDescriptorName"),
        toold::server::systemd::FD_NAME
    );
    assert_eq!(value(&unit, "Install", "WantedBy"), "sockets.target");
    assert!(!value(&unit, "Unit", "Description").is_empty());
    no_invented_documentation(&unit);
}

/// `Documentation=` may only point at something installed (a manual page, a local file): toold
/// has no web address to give.
fn no_invented_documentation(unit: &[(String, String, String)]) {
    for (_, key, value) in unit.iter().filter(|(_, key, _)| key == "Documentation") {
        assert!(
            value
                .split_whitespace()
                .all(|uri| uri.starts_with("man:") || uri.starts_with("file:")),
            "{key}={value}"
        );
    }
}

#[test]
fn the_service_unit_notifies_is_watched_and_drains() {
    let unit = parse_unit("toold.service");
    assert_eq!(value(&unit, "Service", "Type"), "notify");
    assert_eq!(
        value(&unit, "Service", "ExecStart"),
        "%h/.cargo/bin/toold serve"
    );
    assert_eq!(
        value(&unit, "Service", "ExecReload"),
        "%h/.cargo/bin/toold reload"
    );
    assert_eq!(value(&unit, "Service", "WatchdogSec"), "30");
    assert_eq!(value(&unit, "Service", "KillMode"), "mixed");
    assert_eq!(value(&unit, "Service", "Restart"), "on-failure");
    assert_eq!(value(&unit, "Service", "NotifyAccess"), "main");
    assert_eq!(value(&unit, "Unit", "Requires"), "toold.socket");
    assert!(!value(&unit, "Unit", "Description").is_empty());
    no_invented_documentation(&unit);

    let stop_timeout: u64 = value(&unit, "Service", "TimeoutStopSec")
        .parse()
        .expect("TimeoutStopSec in plain seconds");
    assert!(
        stop_timeout >= 60,
        "TimeoutStopSec={stop_timeout} leaves too little room above the drain grace"
    );
}

#[test]
fn the_service_is_hardened_as_far_as_its_sandbox_and_commands_allow() {
    let unit = parse_unit("toold.service");
    for (key, expected) in [
        ("NoNewPrivileges", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(value(&unit, "Service", key), expected, "{key}=");
    }
    // Each of these would break the sandbox (its namespaces, its own /proc) or the commands
    // it runs (the user's home, the network, JITs, the modes of the files they make); the
    // unit's comments say why for each.
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../systemd/toold.service"),
    )
    .expect("the service unit");
    for key in [
        "UMask",
        "ProtectHome",
        "ProtectSystem",
        "ReadOnlyPaths",
        "PrivateUsers",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectClock",
        "ProtectHostname",
        "ProtectControlGroups",
        "PrivateDevices",
        "PrivateTmp",
        "RestrictNamespaces",
        "PrivateNetwork",
        "RestrictAddressFamilies",
        "IPAddressDeny",
        "MemoryDenyWriteExecute",
        "SystemCallFilter",
        "CapabilityBoundingSet",
    ] {
        assert!(
            unit.iter().all(|(_, set, _)| set != key),
            "{key}= would break the sandbox or the commands it runs"
        );
        assert!(
            text.contains(&format!("# - {key}="))
                || text
                    .lines()
                    .any(|line| line.starts_with('#') && line.contains(&format!("{key}="))),
            "the unit does not say why {key}= cannot apply"
        );
    }
}

/// Why the unit leaves `ProtectKernelTunables=` (and the other options that mount over parts
/// of /proc) out, shown rather than told: a daemon started where /proc has a read-only mount
/// over /proc/sys, as that option makes, cannot give its commands a PID namespace of their
/// own (a user namespace may not mount a fresh /proc over a /proc with locked mounts on it),
/// and says so.
#[test]
fn a_locked_mount_over_proc_costs_the_commands_their_pid_namespace() {
    let test = "a_locked_mount_over_proc_costs_the_commands_their_pid_namespace";
    if !toold_tests::require::root(test)
        || toold_tests::require::program(test, "unshare", &[], "util-linux").is_none()
    {
        return;
    }
    let status = |daemon: &TestDaemon| -> serde_json::Value {
        let output = daemon
            .command()
            .args(["status", "--json"])
            .output()
            .expect("toold status");
        serde_json::from_slice(&output.stdout).expect("status --json")
    };
    let plain = TestDaemon::start();
    assert_eq!(status(&plain)["sandbox"]["processes"], "pid_namespace");

    // What ProtectKernelTunables= does to the service's mount namespace.
    let wrapper = [
        "unshare",
        "--mount",
        "/bin/sh",
        "-c",
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec \"$0\" \"$@\"",
    ]
    .map(str::to_owned);
    let hardened = TestDaemon::start_under(&wrapper, &[]);
    let status = status(&hardened);
    assert_ne!(status["sandbox"]["processes"], "pid_namespace", "{status}");
    assert!(
        status["sandbox"]["degraded"]
            .as_array()
            .is_some_and(|degraded| degraded.contains(&"pid_namespace".into())),
        "{status}"
    );
}
