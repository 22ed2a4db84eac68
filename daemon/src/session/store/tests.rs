//! Tests of the session store on real files: records round-trip and replace whole, unreadable
//! or hostile files are reported and skipped, other versions' fields are tolerated, and files
//! stay private.

use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;

use super::*;

fn store() -> (TempDir, SessionStore) {
    let temp = tempfile::tempdir().unwrap();
    let store = SessionStore::new(temp.path().join("state/toold/sessions"));
    (temp, store)
}

fn full_record(id: &str) -> SessionRecord {
    let mut record = SessionRecord::new(id, "/home/u/project");
    record.title = Some("fix the build".into());
    record.roots = vec!["/home/u/project".into(), "/tmp/scratch".into()];
    record.mode = SessionMode::AcceptEdits;
    record.allowed_tools = Some(vec!["read_file".into(), "run_command".into()]);
    record.rules = Rules {
        allow: vec!["run_command(cargo test *)".into()],
        ask: vec!["write_file".into()],
        deny: vec!["read_file(//etc/**)".into()],
    };
    record.timeout_ms = 60_000;
    record.max_output_bytes = 65_536;
    record.max_read_bytes = 1 << 20;
    record.command_env = BTreeMap::from([("RUST_LOG".into(), "debug".into())]);
    record.grants = vec!["run_command(git status)".into()];
    record.on_disconnect = OnDisconnect::Continue;
    record.created_at = "2026-11-30T09:00:00Z".into();
    record.last_seq = 4242;
    record.sandbox = Some(SandboxSettings {
        mode: toold_protocol::SandboxMode::ReadOnly,
        network: false,
    });
    record
}

fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn write(store: &SessionStore, name: &str, content: &str) -> PathBuf {
    fs::create_dir_all(store.dir()).unwrap();
    let path = store.dir().join(name);
    fs::write(&path, content).unwrap();
    path
}

/// The reasons given for unreadable files, by file name.
fn reasons(unreadable: &[(PathBuf, String)]) -> Vec<(String, String)> {
    unreadable
        .iter()
        .map(|(path, why)| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, why.clone())
        })
        .collect()
}

#[test]
fn a_record_round_trips() {
    let (_temp, store) = store();
    let records = [full_record("s_1"), SessionRecord::new("t-2", "/w")];
    for record in &records {
        store.save(record).unwrap();
    }
    let (loaded, unreadable) = store.load_all();
    assert_eq!(unreadable, vec![]);
    assert_eq!(loaded, records);
}

#[test]
fn a_missing_directory_is_an_empty_store() {
    let (_temp, store) = store();
    assert_eq!(store.load_all(), (vec![], vec![]));
}

#[test]
fn capture_and_env_carry_a_sessions_state() {
    let mut env = Env::new("/w");
    env.roots = vec!["/w".into(), "/data".into()];
    env.timeout_ms = 5;
    env.max_output_bytes = 6;
    env.max_read_bytes = 7;
    env.command_env.insert("A".into(), "1".into());
    let rules = Rules {
        allow: vec!["read_file".into()],
        ask: vec![],
        deny: vec!["run_command(rm *)".into()],
    };
    let home = Path::new("/home/u");
    let mut state = SessionState::new(
        env.clone(),
        SessionMode::Plan,
        rules.clone(),
        &Default::default(),
        home,
    )
    .unwrap();
    state.grants.push("run_command(git status)".into());
    state.allowed_tools = Some(vec!["read_file".into()]);

    let mut record = SessionRecord::new("s_1", "/elsewhere");
    record.capture(&state);
    assert_eq!(record.env(env.max_command_timeout_ms), env);
    assert_eq!(record.rules, rules);
    assert_eq!(record.mode, SessionMode::Plan);
    assert_eq!(record.grants, state.grants);
    assert_eq!(record.allowed_tools, state.allowed_tools);
    assert_eq!(record.env(9).max_command_timeout_ms, 9);
}

#[test]
fn a_snapshot_holds_everything_a_record_keeps() {
    let record = full_record("s_1");
    let snapshot = SessionSnapshot {
        session_id: record.session_id.clone(),
        title: record.title.clone(),
        cwd: record.cwd.clone(),
        roots: record.roots.clone(),
        mode: record.mode,
        allowed_tools: record.allowed_tools.clone(),
        rules: record.rules.clone(),
        env: toold_protocol::SessionEnv {
            timeout_ms: record.timeout_ms,
            max_output_bytes: record.max_output_bytes,
            max_read_bytes: record.max_read_bytes,
        },
        command_env: record.command_env.clone(),
        grants: record.grants.clone(),
        attached: 2,
        running_batches: vec!["b_1".into()],
        last_seq: record.last_seq,
        created_at: record.created_at.clone(),
        on_disconnect: record.on_disconnect,
        sandbox: record.sandbox.unwrap(),
        replay_truncated: false,
    };
    assert_eq!(SessionRecord::from_snapshot(&snapshot), record);
}

#[test]
fn saving_again_replaces_the_file_whole() {
    let (_temp, store) = store();
    let mut record = full_record("s_1");
    record.grants = (0..500).map(|n| format!("run_command(step {n})")).collect();
    store.save(&record).unwrap();
    let short = SessionRecord::new("s_1", "/w");
    store.save(&short).unwrap();
    assert_eq!(store.load_all(), (vec![short], vec![]));
    let names: Vec<_> = fs::read_dir(store.dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["s_1.json"], "no temporary file is left behind");
}

/// A reader racing a writer that alternates a large and a small record only ever sees one
/// of them whole: never a torn, empty or missing file.
#[test]
fn a_concurrent_reader_never_sees_a_torn_record() {
    let (_temp, store) = store();
    let mut large = full_record("s_1");
    large.grants = (0..2000)
        .map(|n| format!("run_command(step {n})"))
        .collect();
    let small = SessionRecord::new("s_1", "/w");
    store.save(&small).unwrap();
    let path = store.path_of("s_1").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) || reads == 0 {
                let bytes = fs::read(&path).unwrap();
                let record: SessionRecord = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(record.session_id, "s_1");
                reads += 1;
            }
            reads
        })
    };
    for round in 0..60 {
        store
            .save(if round % 2 == 0 { &large } else { &small })
            .unwrap();
    }
    done.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

#[test]
fn unreadable_files_are_reported_and_skipped() {
    let (_temp, store) = store();
    store.save(&full_record("good_1")).unwrap();
    store.save(&SessionRecord::new("good_2", "/w")).unwrap();
    let full = serde_json::to_string(&full_record("partial")).unwrap();
    write(&store, "partial.json", &full[..full.len() / 2]);
    write(&store, "garbage.json", "\u{0}\u{1}not json");
    write(&store, "empty.json", "");
    write(&store, "array.json", "[1, 2]");
    write(&store, "no_cwd.json", r#"{"session_id":"no_cwd"}"#);
    write(
        &store,
        "relative.json",
        r#"{"session_id":"relative","cwd":"w"}"#,
    );
    write(
        &store,
        "renamed.json",
        r#"{"session_id":"other","cwd":"/w"}"#,
    );
    write(
        &store,
        "future_mode.json",
        r#"{"session_id":"future_mode","cwd":"/w","mode":"yolo"}"#,
    );
    write(&store, "notes.txt", "hello");
    write(
        &store,
        "bad id!.json",
        r#"{"session_id":"bad id!","cwd":"/w"}"#,
    );
    write(&store, ".toold-write-abc123", "{");
    fs::create_dir(store.dir().join("dir.json")).unwrap();
    symlink(
        store.path_of("good_1").unwrap(),
        store.dir().join("link.json"),
    )
    .unwrap();
    let huge = "x".repeat(usize::try_from(MAX_RECORD_BYTES).unwrap() + 1);
    write(&store, "huge.json", &huge);

    let (records, unreadable) = store.load_all();
    let ids: Vec<_> = records.iter().map(|r| r.session_id.as_str()).collect();
    assert_eq!(ids, vec!["good_1", "good_2"]);
    let expected: &[(&str, &str)] = &[
        ("array.json", "not a valid session record: invalid type"),
        (
            "bad id!.json",
            "not a session record: session id \"bad id!\"",
        ),
        ("dir.json", "not a regular file"),
        ("empty.json", "empty file"),
        ("future_mode.json", "unknown variant `yolo`"),
        ("garbage.json", "not a valid session record"),
        ("huge.json", "more than any session record"),
        ("link.json", "not a regular file"),
        ("no_cwd.json", "missing field `cwd`"),
        ("notes.txt", "its name does not end in .json"),
        ("partial.json", "EOF while parsing"),
        ("relative.json", "cwd w is not absolute"),
        ("renamed.json", "holds session \"other\", not \"renamed\""),
    ];
    let got = reasons(&unreadable);
    assert_eq!(
        got.iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>(),
        expected.iter().map(|(name, _)| *name).collect::<Vec<_>>()
    );
    for ((name, why), (_, fragment)) in got.iter().zip(expected) {
        assert!(why.contains(fragment), "{name}: {why:?} lacks {fragment:?}");
    }
    // Nothing is deleted: a newer daemon may read what this one cannot.
    assert!(store.dir().join("future_mode.json").exists());
}

#[test]
fn fields_from_other_versions_are_tolerated() {
    let (_temp, store) = store();
    // A newer daemon's file: unknown fields at the top and inside the rules.
    let newer = json!({
        "version": 7, "session_id": "s_new", "cwd": "/w", "mode": "plan",
        "rules": {"allow": ["read_file"], "escalate": ["run_command"]},
        "expires_at": "2027-01-01T00:00:00Z", "labels": {"team": "infra"}
    });
    write(&store, "s_new.json", &newer.to_string());
    // An older daemon's file: only what every version has.
    write(&store, "s_old.json", r#"{"session_id":"s_old","cwd":"/w"}"#);

    let (records, unreadable) = store.load_all();
    assert_eq!(unreadable, vec![]);
    let [new, old] = &records[..] else {
        panic!("{records:?}")
    };
    assert_eq!(new.version, 7);
    assert_eq!(new.mode, SessionMode::Plan);
    assert_eq!(new.rules.allow, vec!["read_file"]);
    assert_eq!(new.unknown_fields["labels"], json!({"team": "infra"}));

    assert_eq!(old.version, 0);
    assert_eq!(old.roots, vec![PathBuf::from("/w")]);
    assert_eq!(old.mode, SessionMode::Default);
    assert_eq!(old.timeout_ms, defaults::TIMEOUT_MS);
    assert_eq!(old.max_read_bytes, to_u64(defaults::MAX_READ_BYTES));
    assert_eq!(old.on_disconnect, OnDisconnect::Cancel);
    assert!(old.created_at.ends_with('Z'), "{}", old.created_at);

    // Saved again here, the newer daemon's top-level fields survive.
    store.save(new).unwrap();
    let saved: Value =
        serde_json::from_slice(&fs::read(store.path_of("s_new").unwrap()).unwrap()).unwrap();
    assert_eq!(saved["version"], json!(RECORD_VERSION));
    assert_eq!(saved["expires_at"], newer["expires_at"]);
    assert_eq!(saved["labels"], newer["labels"]);
}

#[test]
fn files_and_directories_are_private() {
    let (temp, store) = store();
    store.save(&full_record("s_1")).unwrap();
    assert_eq!(mode_of(store.dir()), 0o700);
    assert_eq!(mode_of(&temp.path().join("state/toold")), 0o700);
    assert_eq!(mode_of(&store.path_of("s_1").unwrap()), 0o600);

    // Loosened by hand, both are narrowed again by the next save.
    fs::set_permissions(store.dir(), Permissions::from_mode(0o755)).unwrap();
    let path = store.path_of("s_1").unwrap();
    fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
    store.save(&full_record("s_1")).unwrap();
    assert_eq!(mode_of(store.dir()), 0o700);
    assert_eq!(mode_of(&path), 0o600);
}

#[test]
fn hostile_ids_are_refused() {
    let (temp, store) = store();
    let long = "a".repeat(MAX_SESSION_ID_LEN + 1);
    let hostile = [
        "",
        ".",
        "..",
        "../escape",
        "a/b",
        "/etc/passwd",
        "a b",
        "s\0x",
        "é",
        "s.json",
        "~",
        "$HOME",
        &long,
    ];
    for id in hostile {
        let mut record = SessionRecord::new("ok", "/w");
        record.session_id = id.to_owned();
        assert!(
            matches!(store.save(&record), Err(StoreError::InvalidId { .. })),
            "saved {id:?}"
        );
        assert!(matches!(
            store.remove(id),
            Err(StoreError::InvalidId { .. })
        ));
        assert!(store.path_of(id).is_err());
    }
    assert!(!store.dir().exists(), "nothing was written");
    let outside: Vec<_> = fs::read_dir(temp.path()).unwrap().collect();
    assert_eq!(outside.len(), 0);
    let longest = "Z".repeat(MAX_SESSION_ID_LEN);
    for id in ["s_1", "S-2_x", "0", &longest] {
        validate_session_id(id).unwrap();
    }
    let message = validate_session_id("../x").unwrap_err().to_string();
    assert!(message.contains("letters, digits"), "{message}");
}

#[test]
fn remove_deletes_and_tolerates_a_missing_record() {
    let (_temp, store) = store();
    store.save(&full_record("s_1")).unwrap();
    store.save(&full_record("s_2")).unwrap();
    store.remove("s_1").unwrap();
    store.remove("s_1").unwrap();
    let (records, unreadable) = store.load_all();
    assert_eq!(unreadable, vec![]);
    assert_eq!(records, vec![full_record("s_2")]);
}

#[test]
fn the_default_directory_follows_xdg() {
    let some = |value: &str| Some(std::ffi::OsString::from(value));
    let cases = [
        (
            some("/state"),
            some("/home/u"),
            Some("/state/toold/sessions"),
        ),
        (
            None,
            some("/home/u"),
            Some("/home/u/.local/state/toold/sessions"),
        ),
        (
            some(""),
            some("/home/u"),
            Some("/home/u/.local/state/toold/sessions"),
        ),
        (
            some("rel/state"),
            some("/home/u"),
            Some("/home/u/.local/state/toold/sessions"),
        ),
        (some("/state"), None, Some("/state/toold/sessions")),
        (None, None, None),
        (None, some("relative"), None),
    ];
    for (xdg, home, expected) in cases {
        assert_eq!(
            crate::paths::toold_state_dir_from(xdg.clone(), home.clone())
                .map(|dir| dir.join("sessions")),
            expected.map(PathBuf::from),
            "XDG_STATE_HOME={xdg:?} HOME={home:?}"
        );
    }
}
