//! The warm index (EXTENSIONS.md section E): what lets a repeated `search_code` read only the
//! files that can match. So far its query planner ([`plan`]: a regex turned into the trigrams
//! every match must contain) and the trigram index of a set of files ([`trigrams`]: which
//! files can satisfy such a query), and the inotify watch of a root whose barrier says what
//! changed since the last query ([`watch`]).

pub mod contents;
pub mod files;
pub mod plan;
pub mod roots;
pub mod trigrams;
pub mod watch;
