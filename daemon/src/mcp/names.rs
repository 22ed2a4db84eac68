//! The names MCP servers and their tools take: a server's name as the config gives it, and a
//! tool `T` of server `S` registered as `mcp__S__T`, valid for the registry and for rules,
//! unique and stable however long or strange `T` is.

use sha2::{Digest, Sha256};

/// The longest name the registry takes.
pub(crate) const MAX_TOOL_NAME_BYTES: usize = 64;

/// What every MCP tool's registered name starts with.
pub(crate) const PREFIX: &str = "mcp__";

/// Whether `name` may name a server: `[a-z0-9][a-z0-9-]{0,31}` (no `_`, so that `mcp__S__T`
/// splits back into its server and tool unambiguously).
pub(crate) fn is_valid_server_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|first| first.is_ascii_lowercase() || first.is_ascii_digit())
        && name.len() <= 32
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The server a registered tool name `mcp__S__T` belongs to (`S`), if it has that shape: a
/// server name never holds `_`, so the first `__` after the prefix ends it.
pub(crate) fn server_of(tool: &str) -> Option<&str> {
    let rest = tool.strip_prefix(PREFIX)?;
    rest.split_once("__").map(|(server, _)| server)
}

/// The registered name of tool `tool` of server `server`: `mcp__S__T` with every character
/// outside `[A-Za-z0-9_-]` replaced by `_`; past [`MAX_TOOL_NAME_BYTES`], cut and ended with
/// `_` and 8 hex digits of the SHA-256 of the name as the server gave it, so that two long
/// names that share their start stay apart, and a name is the same at every start.
pub(crate) fn qualified_tool_name(server: &str, tool: &str) -> String {
    let full = format!("{PREFIX}{server}__{tool}");
    let mut name: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.len() <= MAX_TOOL_NAME_BYTES {
        return name;
    }
    let digest = Sha256::digest(full.as_bytes());
    let suffix: String = digest[..4]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    // Every character is ASCII by now: any byte index is a character boundary.
    name.truncate(MAX_TOOL_NAME_BYTES - 1 - suffix.len());
    name.push('_');
    name.push_str(&suffix);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_name_gives_its_server() {
        assert_eq!(server_of("mcp__fs__read_file"), Some("fs"));
        assert_eq!(server_of("mcp__my-server__a__b"), Some("my-server"));
        assert_eq!(server_of(&qualified_tool_name("fs", "x y")), Some("fs"));
        assert_eq!(server_of("read_file"), None);
        assert_eq!(server_of("mcp__nothing"), None);
    }

    #[test]
    fn server_names_follow_the_pattern() {
        for good in ["fs", "a", "0", "my-server", "x1-2", &"a".repeat(32)] {
            assert!(is_valid_server_name(good), "{good:?} refused");
        }
        for bad in [
            "",
            "-fs",
            "my_server",
            "Fs",
            "fs.local",
            "fs server",
            "é",
            &"a".repeat(33),
        ] {
            assert!(!is_valid_server_name(bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn tool_names_are_prefixed_and_sanitized() {
        assert_eq!(qualified_tool_name("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(qualified_tool_name("fs", "read-file"), "mcp__fs__read-file");
        assert_eq!(qualified_tool_name("fs", "a.b/c d"), "mcp__fs__a_b_c_d");
        assert_eq!(qualified_tool_name("fs", "ünï"), "mcp__fs___n_");
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let long = "t".repeat(100);
        let name = qualified_tool_name("fs", &long);
        assert_eq!(name.len(), MAX_TOOL_NAME_BYTES);
        assert!(name.starts_with("mcp__fs__ttt"), "{name}");
        let (kept, suffix) = name.split_at(MAX_TOOL_NAME_BYTES - 9);
        assert!(kept.chars().all(|c| c == '_' || c.is_ascii_alphanumeric()));
        assert!(suffix.starts_with('_'));
        assert!(
            suffix[1..].chars().all(|c| c.is_ascii_hexdigit()),
            "{suffix}"
        );
        assert_eq!(name, qualified_tool_name("fs", &long), "stable");

        // Two long names that differ only past the cut stay apart.
        let other = format!("{}x", "t".repeat(99));
        assert_ne!(qualified_tool_name("fs", &other), name);
        // So do two that sanitize alike.
        let dotted = format!("{}.", "t".repeat(99));
        let spaced = format!("{} ", "t".repeat(99));
        assert_ne!(
            qualified_tool_name("fs", &dotted),
            qualified_tool_name("fs", &spaced)
        );
        // Exactly at the limit: kept whole.
        let fits = "t".repeat(MAX_TOOL_NAME_BYTES - "mcp__fs__".len());
        assert_eq!(qualified_tool_name("fs", &fits), format!("mcp__fs__{fits}"));
    }

    #[test]
    fn every_qualified_name_is_a_valid_tool_name() {
        for tool in ["x", "a b", &"é".repeat(40), &"z".repeat(200), "ok-tool_1"] {
            let name = qualified_tool_name("server-1", tool);
            assert!(
                crate::tools::registry::is_valid_tool_name(&name),
                "{name:?}"
            );
        }
    }
}
