//! The warm index on the wire (docs/protocol.md section 11.13): `index/status`, each root's index
//! and how often a search fell back to a cold walk, by reason.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `index/status` params: none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexStatusParams {}

/// One root's index (the directory a `find_files` or `search_code` started from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRootStatus {
    pub root: String,
    /// `building`, `ready` or `cold`.
    pub state: String,
    /// Why the index is cold, when it is (one of the fallback reasons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The files it holds (0 unless ready).
    pub files: u64,
    pub memory_bytes: u64,
    /// When it was last built whole (RFC 3339), `null` before its first build ends.
    pub last_rebuild: Option<String>,
    /// How many searches of this root walked cold, by reason.
    pub fallbacks: BTreeMap<String, u64>,
}
