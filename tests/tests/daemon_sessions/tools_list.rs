//! `tools/list` as a session sees it: only the tools the session may see.

use serde_json::json;
use toold_tests::daemon::{TestDaemon, no_answers};

#[tokio::test]
async fn tools_list_shows_what_the_session_may_see() {
    let daemon = TestDaemon::start();
    let client = daemon.connect(json!({}), no_answers()).await;
    let session = client.create_session(&daemon.work(), json!({})).await;

    let everything = client.tool_names(json!({})).await;
    assert_eq!(
        client.tool_names(json!({"session_id": session})).await,
        everything
    );

    let read_only = client.tool_names(json!({"safety": "read_only"})).await;
    assert_eq!(read_only, ["find_files", "read_file", "search_code"]);
    client
        .update_session(&session, json!({"mode": "plan"}))
        .await;
    assert_eq!(
        client.tool_names(json!({"session_id": session})).await,
        read_only
    );

    client
        .update_session(
            &session,
            json!({"allowed_tools": ["read_file", "run_command"]}),
        )
        .await;
    assert_eq!(
        client.tool_names(json!({"session_id": session})).await,
        ["read_file"],
        "plan mode still hides run_command"
    );

    client
        .update_session(&session, json!({"mode": "default"}))
        .await;
    assert_eq!(
        client.tool_names(json!({"session_id": session})).await,
        ["read_file", "run_command"]
    );
    assert_eq!(
        client
            .tool_names(json!({"session_id": session, "allowed": ["run_command", "write_file"]}))
            .await,
        ["run_command"],
        "allowed narrows the session's list"
    );
    assert_eq!(
        client
            .tool_names(json!({"session_id": session, "safety": "side_effect"}))
            .await,
        ["run_command"]
    );
}
