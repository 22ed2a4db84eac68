//! Leaving the sandbox (`run_command`'s `escalate`): a command that failed on a denied write or
//! connection is told how to ask; asked, the person sees the model's justification and exactly
//! what is loosened; approved, the command runs with only that loosened. Rules and grants speak
//! of escalations only when they say so (` with …`), and `allow_unsandboxed = false` refuses
//! `unsandboxed` without asking.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toold_protocol::Request;
use toold_protocol::peer::Reply;
use toold_tests::daemon::{TestClient, TestDaemon, answer_with, asked_nobody, no_answers};

use super::{Places, output, quoted};

/// Runs one `run_command` call with `arguments`; the call's result.
async fn call(client: &TestClient, session: &str, arguments: Value) -> Value {
    let response = client
        .execute(
            session,
            json!([{"id": "c", "name": "run_command", "arguments": arguments}]),
        )
        .await;
    response["results"][0]["result"].clone()
}

/// A client that approves each request with `decision`, recording them.
async fn approving(
    daemon: &TestDaemon,
    decision: &'static str,
) -> (TestClient, Arc<Mutex<Vec<Request>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = daemon
        .connect(
            json!({"approvals": true}),
            answer_with(seen.clone(), move |_| {
                Reply::result(json!({"decision": decision}))
            }),
        )
        .await;
    (client, seen)
}

fn requests(seen: &Mutex<Vec<Request>>) -> Vec<Value> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|request| request.params.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_denied_write_names_the_escalation_and_an_approved_one_loosens_only_that() {
    let daemon = TestDaemon::start();
    let places = Places::new();
    let other = tempfile::tempdir_in(super::outside_base()).unwrap();
    let other = other.path().canonicalize().unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let port = tcp.local_addr().unwrap().port();

    // In the sandbox, the write fails, and the hint says how to ask for exactly that place.
    let bystander = daemon.connect(json!({}), no_answers()).await;
    let session = bystander.create_session(&places.project, json!({})).await;
    let target = places.outside.join("dir/new.txt");
    let line = format!("touch {}", quoted(&target));
    let result = call(&bystander, &session, json!({"command": line})).await;
    assert_eq!(result["error_type"], "command_failed", "{result}");
    let hint = result["metadata"]["sandbox"]["hint"].as_str().unwrap();
    let wanted = format!(
        "escalate {{\"writable\": [\"{}\"]}}",
        places.outside.join("dir").display()
    );
    assert!(hint.contains(&wanted), "{hint}");
    assert!(!target.exists());

    // Asked with the escalation and no approver: asked, so nothing ran.
    let escalated = json!({
        "command": format!(
            "touch {} ; touch {}/also.txt ; echo x > /dev/tcp/127.0.0.1/{port}",
            quoted(&target),
            other.display()
        ),
        "escalate": {"writable": [places.outside.join("dir")]},
        "justification": "the build writes its output there",
    });
    let result = call(&bystander, &session, escalated.clone()).await;
    assert!(asked_nobody(&result), "{result}");
    assert!(!target.exists());

    // An approver sees the justification and exactly the loosening; approved, the command
    // writes there, and only there: not the other place, not the network.
    let (approver, seen) = approving(&daemon, "allow_once").await;
    let session = approver.create_session(&places.project, json!({})).await;
    let result = call(&approver, &session, escalated).await;
    let asked = requests(&seen);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let escalation = &asked[0]["escalation"];
    assert_eq!(
        escalation["writable"],
        json!([places.outside.join("dir").display().to_string()])
    );
    assert_eq!(
        escalation["justification"],
        "the build writes its output there"
    );
    assert!(escalation.get("network").is_none(), "{escalation}");
    assert!(
        asked[0]["reason"]
            .as_str()
            .unwrap()
            .contains("leave its sandbox"),
        "{}",
        asked[0]
    );
    assert!(target.is_file(), "{result}");
    assert!(!other.join("also.txt").exists(), "{result}");
    assert!(tcp.accept().is_err(), "a connection reached the listener");
}

#[tokio::test]
async fn an_approved_network_escalation_reaches_the_network_and_nothing_else_does() {
    let daemon = TestDaemon::start();
    let places = Places::new();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let (client, seen) = approving(&daemon, "allow_session").await;
    let session = client.create_session(&places.project, json!({})).await;
    let line = format!("echo hello > /dev/tcp/127.0.0.1/{port}");

    // Without escalation: refused by the sandbox, and the hint names the network escalation.
    let result = call(&client, &session, json!({"command": line})).await;
    assert_eq!(result["error_type"], "command_failed", "{result}");
    assert_eq!(result["metadata"]["permission"]["step"], "sandboxed");
    let asked_for_network = json!({
        "command": line,
        "escalate": {"network": true},
        "justification": "it sends the greeting",
    });
    let result = call(&client, &session, asked_for_network.clone()).await;
    assert!(result["error_type"].is_null(), "{result}");
    let (mut stream, _) = tcp.accept().unwrap();
    let mut received = String::new();
    std::io::Read::read_to_string(&mut stream, &mut received).unwrap();
    assert_eq!(received, "hello\n");
    assert_eq!(requests(&seen).len(), 1);
    assert_eq!(
        requests(&seen)[0]["suggestions"][0],
        format!("run_command({line}) with network")
    );

    // The session's grant covers the same escalated call again, unasked; writing outside is
    // another escalation, asked again.
    let again = call(&client, &session, asked_for_network).await;
    assert!(again["error_type"].is_null(), "{again}");
    assert_eq!(requests(&seen).len(), 1, "the grant covered it");
    tcp.accept().unwrap();
    let writable = json!({
        "command": line,
        "escalate": {"network": true, "writable": [places.outside]},
        "justification": "more",
    });
    call(&client, &session, writable).await;
    assert_eq!(requests(&seen).len(), 2, "a wider escalation asks");
    assert!(output(&again).is_empty());
}

#[tokio::test]
async fn rules_speak_of_escalations_only_when_they_say_so() {
    let daemon = TestDaemon::start();
    let places = Places::new();
    let client = daemon.connect(json!({}), no_answers()).await;
    let outside = places.outside.display().to_string();
    let rules = json!({
        "allow": [
            "run_command(touch *)",
            format!("run_command(touch *) with writable={outside}"),
        ],
        "deny": ["run_command(*) with network"],
    });
    let session = client
        .create_session(&places.project, json!({"rules": rules}))
        .await;
    let target = places.outside.join("ruled.txt");

    // The rule with `writable=` covers the escalated call: it runs unasked and writes.
    let result = call(
        &client,
        &session,
        json!({"command": format!("touch {}", quoted(&target)), "escalate": {"writable": [outside]}}),
    )
    .await;
    assert!(result["error_type"].is_null(), "{result}");
    assert!(target.is_file());
    // The deny rule with `network` refuses the network, and only that.
    let result = call(
        &client,
        &session,
        json!({"command": "touch x", "escalate": {"network": true}}),
    )
    .await;
    assert_eq!(result["error_type"], "permission_denied", "{result}");
    assert!(result["error"].as_str().unwrap().contains("with network"));
    assert!(!places.project.join("x").exists());

    // A rule without `with` does not cover an escalated call: it asks.
    let session = client
        .create_session(
            &places.project,
            json!({"rules": {"allow": ["run_command(touch *)"]}}),
        )
        .await;
    let result = call(
        &client,
        &session,
        json!({"command": format!("touch {}/other.txt", places.outside.display()), "escalate": {"writable": [outside]}}),
    )
    .await;
    assert!(asked_nobody(&result), "{result}");
    assert!(!places.outside.join("other.txt").exists());

    // A rule's `with` part that is not one is refused, never read as a pattern.
    let refused = client
        .request(
            "session/create",
            json!({"cwd": places.project, "rules": {"allow": ["run_command(ls) with everything"]}}),
        )
        .await;
    assert!(format!("{refused:?}").contains("with"), "{refused:?}");
}

#[tokio::test]
async fn unsandboxed_is_refused_outright_where_the_config_forbids_it() {
    let daemon = TestDaemon::start();
    let places = Places::new();
    let (client, seen) = approving(&daemon, "allow_once").await;
    let session = client.create_session(&places.project, json!({})).await;
    let target = places.outside.join("free.txt");
    let result = call(
        &client,
        &session,
        json!({"command": format!("touch {}", quoted(&target)), "escalate": {"unsandboxed": true}}),
    )
    .await;
    assert_eq!(result["error_type"], "permission_denied", "{result}");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("allow_unsandboxed"),
        "{result}"
    );
    assert!(requests(&seen).is_empty(), "nobody was asked");
    assert!(!target.exists());

    // Where the config allows it, it is asked, and approved it runs with no sandbox.
    let daemon = TestDaemon::start_with_config(Some("[sandbox]\nallow_unsandboxed = true\n"));
    let (client, seen) = approving(&daemon, "allow_once").await;
    let session = client.create_session(&places.project, json!({})).await;
    let result = call(
        &client,
        &session,
        json!({"command": format!("touch {}", quoted(&target)), "escalate": {"unsandboxed": true}, "justification": "j"}),
    )
    .await;
    assert!(result["error_type"].is_null(), "{result}");
    assert_eq!(requests(&seen)[0]["escalation"]["unsandboxed"], true);
    assert!(target.is_file());
    assert!(result["metadata"]["sandbox"]["mode"] == "off", "{result}");
}
