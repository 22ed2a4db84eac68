//! The warm index (docs/protocol.md section 11.13): what lets a repeated `find_files` skip the walk
//! and a repeated `search_code` read only the files that can match, with the answers of a cold
//! walk. [`roots`]: the daemon's indexes, one per directory searched, synced at every query;
//! [`files`]: a root's file list, kept current from [`watch`] (a root's inotify watches and
//! the barrier that says what changed, and [`mounts`], the mount points inside it); [`contents`]: the trigram index of a root's files
//! ([`trigrams`]) with the overlay of files changed since, queried by [`plan`] (a regex turned
//! into the trigrams every match must contain).

pub(crate) mod contents;
pub mod files;
pub(crate) mod mounts;
pub mod plan;
pub mod roots;
pub mod trigrams;
pub mod watch;
