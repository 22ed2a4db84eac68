//! What a server's `tools/list` becomes in the registry: each tool its config admits either
//! gets a definition under its `mcp__S__T` name, with the safety its server's trust allows, or
//! is quarantined with the reason, and the server's other tools live on. Read from the raw
//! JSON of the listing, one tool at a time, so that one malformed tool never fails the rest.

use serde_json::{Map, Value};
use toold_protocol::{Safety, ToolDefinition, ToolSource};

use super::names::qualified_tool_name;
use super::{McpServerConfig, Trust};

/// One tool of a server, ready to register.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    /// The tool's name as the server knows it (what `tools/call` sends).
    pub server_name: String,
    /// Its registry definition: `mcp__S__T`, the server's schema, `source: {"mcp": S}`.
    pub definition: ToolDefinition,
}

/// A tool left out, and why (`mcp/status` lists them; the daemon logs each once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The server's name for it, or `tools[INDEX]` when it has none.
    pub tool: String,
    pub reason: String,
}

/// A server's tools as the registry will hold them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    pub tools: Vec<ListedTool>,
    pub quarantined: Vec<Quarantined>,
    /// Names the config's `enabled_tools` / `disabled_tools` left out (not faults).
    pub not_enabled: Vec<String>,
}

/// The most one tool's definition may take, as the server sent it (its name, description and
/// schemas): the largest tools of real servers take a few KiB.
pub(crate) const MAX_TOOL_BYTES: usize = 64 * 1024;
/// The most one server's tools may take together: what every client's `tools/list` carries
/// and the daemon keeps. The pages of a listing past it are not read.
pub(crate) const MAX_LISTING_BYTES: usize = 2 * 1024 * 1024;
/// The most tools one server may register.
pub(crate) const MAX_TOOLS: usize = 512;
/// The most quarantined tools listed one by one; the rest are counted in one more entry.
const MAX_QUARANTINED_SHOWN: usize = 100;

/// How many bytes `value` takes as compact JSON, without writing it anywhere.
pub(crate) fn json_bytes(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Reads the `tools` of a `tools/list` result (every page's, in order) for `server`. A schema
/// that is an object schema but does not compile is quarantined when it is registered (the
/// registry compiles it). Bounded: a tool over [`MAX_TOOL_BYTES`], and every tool past
/// [`MAX_TOOLS`] or past [`MAX_LISTING_BYTES`] in all, is quarantined with the bound it
/// exceeded; `cut_short` says the listing's later pages were left unread (that bound again).
pub(crate) fn list(server: &McpServerConfig, tools: &[Value], cut_short: bool) -> Listing {
    let mut listing = Listing::default();
    let mut listed_bytes = 0;
    for (index, tool) in tools.iter().enumerate() {
        let Some(fields) = tool.as_object() else {
            listing.quarantined.push(Quarantined {
                tool: format!("tools[{index}]"),
                reason: "not a JSON object".to_owned(),
            });
            continue;
        };
        let name = match fields.get("name") {
            Some(Value::String(name)) if !name.is_empty() => name.clone(),
            _ => {
                listing.quarantined.push(Quarantined {
                    tool: format!("tools[{index}]"),
                    reason: "no name (a non-empty string)".to_owned(),
                });
                continue;
            }
        };
        if !server.tools.admits(&server.name, &name) {
            listing.not_enabled.push(name);
            continue;
        }
        let bytes = json_bytes(tool);
        let over = if bytes > MAX_TOOL_BYTES {
            Some(format!(
                "its definition takes {} KiB, over the {} KiB one tool may take",
                bytes.div_ceil(1024),
                MAX_TOOL_BYTES / 1024
            ))
        } else if listing.tools.len() == MAX_TOOLS {
            Some(format!(
                "the server lists more than the {MAX_TOOLS} tools one server may have"
            ))
        } else if listed_bytes + bytes > MAX_LISTING_BYTES {
            Some(format!(
                "the server's tools take more than the {} MiB one server's may take in all",
                MAX_LISTING_BYTES >> 20
            ))
        } else {
            None
        };
        if let Some(reason) = over {
            listing.quarantined.push(Quarantined { tool: name, reason });
            continue;
        }
        match definition(server, &name, fields, &listing.tools) {
            Ok(definition) => {
                listed_bytes += bytes;
                listing.tools.push(ListedTool {
                    server_name: name,
                    definition,
                });
            }
            Err(reason) => listing.quarantined.push(Quarantined { tool: name, reason }),
        }
    }
    if cut_short {
        listing.quarantined.push(Quarantined {
            tool: "the rest of the listing".to_owned(),
            reason: format!(
                "its pages went on past the {} MiB one server's tools may take in all, and were \
                 not read",
                MAX_LISTING_BYTES >> 20
            ),
        });
    }
    if listing.quarantined.len() > MAX_QUARANTINED_SHOWN {
        let more = listing.quarantined.len() - MAX_QUARANTINED_SHOWN;
        listing.quarantined.truncate(MAX_QUARANTINED_SHOWN);
        listing.quarantined.push(Quarantined {
            tool: format!("{more} more tools"),
            reason: "quarantined too; only the first are listed one by one".to_owned(),
        });
    }
    listing
}

fn definition(
    server: &McpServerConfig,
    name: &str,
    fields: &Map<String, Value>,
    listed: &[ListedTool],
) -> Result<ToolDefinition, String> {
    let schema = fields
        .get("inputSchema")
        .ok_or("no inputSchema".to_owned())?;
    let is_object_schema = schema
        .as_object()
        .is_some_and(|schema| schema.get("type") == Some(&Value::String("object".into())));
    if !is_object_schema {
        return Err(format!(
            "its inputSchema is not a JSON object schema with \"type\": \"object\" (got {})",
            shown(schema)
        ));
    }
    let qualified = qualified_tool_name(&server.name, name);
    if let Some(taken) = listed.iter().find(|tool| tool.definition.name == qualified) {
        return Err(format!(
            "its name becomes {qualified}, which tool {:?} of the same server already has",
            taken.server_name
        ));
    }
    let description = match fields.get("description") {
        Some(Value::String(text)) => text.clone(),
        _ => String::new(),
    };
    Ok(ToolDefinition {
        name: qualified,
        description,
        input_schema: schema.clone(),
        safety: safety(server.trust, fields.get("annotations")),
        system: false,
        timeout_ms: u64::try_from(server.tool_timeout.as_millis()).ok(),
        source: ToolSource::Mcp(server.name.clone()),
    })
}

/// `read_only` only for a trusted server's tool annotated `readOnlyHint: true`: an untrusted
/// server's annotations never lower the risk of its tools.
fn safety(trust: Trust, annotations: Option<&Value>) -> Safety {
    let read_only_hint = annotations
        .and_then(|annotations| annotations.get("readOnlyHint"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match trust {
        Trust::Trusted if read_only_hint => Safety::ReadOnly,
        Trust::Trusted | Trust::Untrusted => Safety::SideEffect,
    }
}

/// A value for a reason: short, on one line.
fn shown(value: &Value) -> String {
    const MAX_CHARS: usize = 60;
    let text = value.to_string();
    if text.chars().count() <= MAX_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MAX_CHARS).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::mcp::{McpTransport, Start, ToolFilter};

    fn server(trust: Trust, tools: ToolFilter) -> McpServerConfig {
        McpServerConfig {
            name: "fs".into(),
            transport: McpTransport::Stdio {
                command: "server".into(),
                args: Vec::new(),
                env: Default::default(),
                cwd: None,
            },
            trust,
            start: Start::Eager,
            startup_timeout: Duration::from_secs(30),
            tool_timeout: Duration::from_secs(120),
            tools,
        }
    }

    fn object_schema() -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}}})
    }

    #[test]
    fn a_valid_tool_is_named_described_and_sourced() {
        let listing = list(
            &server(Trust::Untrusted, ToolFilter::default()),
            &[
                json!({"name": "read_file", "description": "Reads a file", "inputSchema": object_schema()}),
            ],
            false,
        );
        assert_eq!(listing.quarantined, []);
        let [tool] = &listing.tools[..] else {
            panic!("{listing:?}")
        };
        assert_eq!(tool.server_name, "read_file");
        assert_eq!(
            tool.definition,
            ToolDefinition {
                name: "mcp__fs__read_file".into(),
                description: "Reads a file".into(),
                input_schema: object_schema(),
                safety: Safety::SideEffect,
                system: false,
                timeout_ms: Some(120_000),
                source: ToolSource::Mcp("fs".into()),
            }
        );
    }

    #[test]
    fn bad_tools_are_quarantined_and_the_others_live() {
        let long = "x".repeat(80);
        let listing = list(
            &server(Trust::Untrusted, ToolFilter::default()),
            &[
                json!("not an object"),
                json!({"description": "no name", "inputSchema": object_schema()}),
                json!({"name": "no_schema"}),
                json!({"name": "array_schema", "inputSchema": {"type": "array"}}),
                json!({"name": "string_schema", "inputSchema": "object"}),
                json!({"name": "good", "inputSchema": object_schema()}),
                json!({"name": long, "inputSchema": object_schema()}),
                json!({"name": "a.b", "inputSchema": object_schema()}),
                json!({"name": "a/b", "inputSchema": object_schema()}),
            ],
            false,
        );
        let quarantined: Vec<(&str, &str)> = listing
            .quarantined
            .iter()
            .map(|tool| (tool.tool.as_str(), tool.reason.as_str()))
            .collect();
        assert_eq!(
            quarantined,
            [
                ("tools[0]", "not a JSON object"),
                ("tools[1]", "no name (a non-empty string)"),
                ("no_schema", "no inputSchema"),
                (
                    "array_schema",
                    "its inputSchema is not a JSON object schema with \"type\": \"object\" (got {\"type\":\"array\"})"
                ),
                (
                    "string_schema",
                    "its inputSchema is not a JSON object schema with \"type\": \"object\" (got \"object\")"
                ),
                (
                    "a/b",
                    "its name becomes mcp__fs__a_b, which tool \"a.b\" of the same server already has"
                ),
            ]
        );
        let names: Vec<&str> = listing
            .tools
            .iter()
            .map(|tool| tool.definition.name.as_str())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names[0], "mcp__fs__good");
        assert_eq!(names[1].len(), 64, "the long name is cut: {}", names[1]);
        assert_eq!(names[2], "mcp__fs__a_b");
        assert_eq!(
            listing.tools[1].server_name, long,
            "calls use the server's own name"
        );
    }

    #[test]
    fn only_a_trusted_servers_read_only_hint_makes_a_tool_read_only() {
        let tools = [
            json!({"name": "look", "inputSchema": object_schema(), "annotations": {"readOnlyHint": true}}),
            json!({"name": "touch", "inputSchema": object_schema(), "annotations": {"readOnlyHint": false}}),
            json!({"name": "plain", "inputSchema": object_schema()}),
            json!({"name": "odd", "inputSchema": object_schema(), "annotations": {"readOnlyHint": "true"}}),
        ];
        let safeties = |trust| -> Vec<Safety> {
            list(&server(trust, ToolFilter::default()), &tools, false)
                .tools
                .iter()
                .map(|tool| tool.definition.safety)
                .collect()
        };
        assert_eq!(
            safeties(Trust::Trusted),
            [
                Safety::ReadOnly,
                Safety::SideEffect,
                Safety::SideEffect,
                Safety::SideEffect
            ]
        );
        assert_eq!(safeties(Trust::Untrusted), [Safety::SideEffect; 4]);
    }

    #[test]
    fn the_config_filter_leaves_tools_out_without_quarantine() {
        let filter = ToolFilter::new(&["read_*".to_owned()], &["read_secret".to_owned()]).unwrap();
        let listing = list(
            &server(Trust::Untrusted, filter),
            &[
                json!({"name": "read_file", "inputSchema": object_schema()}),
                json!({"name": "read_secret", "inputSchema": object_schema()}),
                json!({"name": "write_file", "inputSchema": {"type": "array"}}),
            ],
            false,
        );
        assert_eq!(listing.tools.len(), 1);
        assert_eq!(listing.not_enabled, ["read_secret", "write_file"]);
        assert_eq!(
            listing.quarantined,
            [],
            "a tool not enabled is not looked at"
        );
    }

    #[test]
    fn a_listing_is_bounded_per_tool_in_count_and_in_all() {
        let tool = |name: String, description_bytes: usize| json!({"name": name, "description": "d".repeat(description_bytes), "inputSchema": object_schema()});
        let fs = server(Trust::Untrusted, ToolFilter::default());
        // One tool over its bound: quarantined, the others kept.
        let listing = list(
            &fs,
            &[tool("big".into(), MAX_TOOL_BYTES), tool("small".into(), 10)],
            false,
        );
        assert_eq!(listing.tools.len(), 1);
        assert_eq!(listing.quarantined[0].tool, "big");
        assert!(listing.quarantined[0].reason.contains("over the 64 KiB"));
        // More tools than a server may have: the first MAX_TOOLS kept.
        let many: Vec<Value> = (0..MAX_TOOLS + 3)
            .map(|i| tool(format!("t{i}"), 1))
            .collect();
        let listing = list(&fs, &many, false);
        assert_eq!(listing.tools.len(), MAX_TOOLS);
        assert_eq!(listing.quarantined.len(), 3);
        // More bytes in all than a server may take: kept until the budget, and the quarantine
        // itself listed to a bound, the rest counted.
        let heavy: Vec<Value> = (0..400).map(|i| tool(format!("h{i}"), 60 * 1024)).collect();
        let listing = list(&fs, &heavy, true);
        let kept: usize = listing
            .tools
            .iter()
            .map(|tool| tool.definition.description.len())
            .sum();
        assert!(kept <= MAX_LISTING_BYTES, "{kept}");
        let fit = MAX_LISTING_BYTES / (60 * 1024 + 400)..=MAX_LISTING_BYTES / (60 * 1024);
        assert!(
            fit.contains(&listing.tools.len()),
            "{}",
            listing.tools.len()
        );
        assert_eq!(listing.quarantined.len(), MAX_QUARANTINED_SHOWN + 1);
        assert!(
            listing.quarantined[MAX_QUARANTINED_SHOWN]
                .tool
                .ends_with("more tools")
        );
    }
}
