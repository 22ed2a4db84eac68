//! What no model may read stays unread: what a line reads against read deny rules, `edit_file`
//! on a denied file, and the walks of `search_code` and `find_files`.

use serde_json::{Value, json};

use super::{SECRET, call, execute_one, no_effect, session_with, setup, shown};
use toold_tests::daemon::command_call;

#[tokio::test]
async fn what_a_line_reads_is_judged_against_read_deny_rules() {
    let Some((_daemon, client, workspace, session)) = setup(
        "what_a_line_reads_is_judged_against_read_deny_rules",
        "default",
    )
    .await
    else {
        return;
    };
    let secret = workspace.project.join("secrets/key.txt");
    let lines = [
        "xargs echo < secrets/key.txt".to_owned(),
        "xargs -a secrets/key.txt echo".to_owned(),
        "xargs --arg-file=secrets/key.txt echo".to_owned(),
        format!("xargs -a {} echo", secret.display()),
        "echo hi < secrets/key.txt".to_owned(),
        "echo hi <> secrets/key.txt".to_owned(),
        "echo \"$(< secrets/key.txt)\"".to_owned(),
        "echo hi 0< ./secrets/../secrets/key.txt".to_owned(),
        "cd secrets && xargs echo < key.txt".to_owned(),
        "echo $(<secrets/key.txt)".to_owned(),
        "env xargs echo < secrets/key.txt".to_owned(),
    ];
    let calls: Vec<Value> = lines.iter().map(|line| command_call("c", line)).collect();
    no_effect(&client, &session, &workspace, &calls, &[]).await;

    // The deny rule itself is the reason, not only the lack of an allow rule.
    let response = execute_one(
        &client,
        &session,
        command_call("c", "echo hi < secrets/key.txt"),
    )
    .await;
    let message = response["results"][0]["result"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("read_file(secrets/**)"), "{message}");
}

#[tokio::test]
async fn walks_never_show_what_deny_rules_cover() {
    let Some((_daemon, client, workspace, _session)) =
        setup("walks_never_show_what_deny_rules_cover", "default").await
    else {
        return;
    };
    let project = &workspace.project;
    for (path, content) in [
        (".env", format!("TOKEN={SECRET}\n")),
        ("private/notes.txt", format!("{SECRET}\n")),
        (
            "deep/er/unlisted.txt",
            "searchable, never listed\n".to_owned(),
        ),
        ("src/visible.txt", "visible needle\n".to_owned()),
    ] {
        let path = project.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    std::os::unix::fs::symlink(project.join("secrets"), project.join("src/link")).unwrap();
    let rules = json!({"deny": ["read_file(secrets/**)", "read_file(.env)",
        "search_code(private/**)", "find_files(**/er/**)"]});
    let session = session_with(&client, project, "default", rules).await;
    let search = |arguments: Value| call("search_code", arguments);
    let find = |arguments: Value| call("find_files", arguments);
    let calls = [
        search(json!({"pattern": "SECRET"})),
        search(json!({"pattern": "SECRET", "glob": "**"})),
        search(json!({"pattern": "SECRET", "glob": ".*"})),
        search(json!({"pattern": "SECRET", "glob": "{.env,**/*.txt}"})),
        search(json!({"pattern": "secret", "case_insensitive": true, "glob": "**/.env"})),
        search(json!({"pattern": "SECRET", "path": "private"})),
        search(json!({"pattern": "SECRET", "path": "./private/notes.txt"})),
        search(json!({"pattern": "SECRET", "path": "secrets"})),
        search(json!({"pattern": "SECRET", "path": "src/link/key.txt"})),
        search(json!({"pattern": "SECRET", "path": "deep"})),
        search(json!({"pattern": "TOKEN", "path": ".", "context": 3, "glob": "!*.rs"})),
        find(json!({"pattern": "**"})),
        find(json!({"pattern": "**/.env"})),
        find(json!({"pattern": ".*"})),
        find(json!({"pattern": "*", "path": "secrets"})),
        find(json!({"pattern": "**/*.txt"})),
        find(json!({"pattern": "**/notes.txt", "path": "private"})),
    ];
    let mut shown_anywhere = Vec::new();
    for call in &calls {
        let response = execute_one(&client, &session, call.clone()).await;
        let text = shown(&response);
        // A find_files deny rule hides from find_files only; the others from both walks.
        let listing = call["name"] == "find_files";
        for hidden in [SECRET, "key.txt", ".env", "notes.txt", "unlisted"] {
            if text.contains(hidden) && (listing || hidden != "unlisted") {
                shown_anywhere.push(format!("{call} showed {hidden}: {text}"));
            }
        }
    }
    assert!(shown_anywhere.is_empty(), "{}", shown_anywhere.join("\n"));

    // What no rule hides is still found: the walks skip only what is denied.
    let response = execute_one(&client, &session, search(json!({"pattern": "needle"}))).await;
    assert!(shown(&response).contains("src/visible.txt"), "{response}");
    let response = execute_one(
        &client,
        &session,
        search(json!({"pattern": "never listed"})),
    )
    .await;
    assert!(
        shown(&response).contains("deep/er/unlisted.txt"),
        "{response}"
    );
    let response = execute_one(&client, &session, find(json!({"pattern": "**/*.txt"}))).await;
    let text = shown(&response);
    assert!(
        text.contains("src/visible.txt") && text.contains("keep.txt"),
        "{text}"
    );
}

/// `edit_file` reads what it edits and shows lines of it: a file no model may read is not
/// edited either, not even in `accept_edits`.
#[tokio::test]
async fn edit_file_never_shows_what_read_rules_deny() {
    let Some((_daemon, client, workspace, _session)) =
        setup("edit_file_never_shows_what_read_rules_deny", "default").await
    else {
        return;
    };
    std::fs::write(
        workspace.project.join(".env"),
        format!("A=1\nTOKEN={SECRET}\nB=2\n"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        workspace.project.join("secrets/key.txt"),
        workspace.project.join("lkey"),
    )
    .unwrap();
    let rules = json!({"deny": ["read_file(secrets/**)", "read_file(.env)"]});
    let session = session_with(&client, &workspace.project, "accept_edits", rules).await;
    let edit = |path: &str, old: &str| {
        call(
            "edit_file",
            json!({"path": path, "old_string": old, "new_string": "x"}),
        )
    };
    let calls = [
        edit(".env", "B=2"),
        edit("./.env", "A=1"),
        edit("lkey", "SECRET"),
        edit("secrets/key.txt", "SECRET"),
        edit("secrets/../secrets/key.txt", "7f3a9c"),
    ];
    no_effect(&client, &session, &workspace, &calls, &[]).await;
}
