//! What sandboxed commands cannot read at all: the credential stores of the user's home by
//! default (`[sandbox] hidden` replaces the list), and what the session's read deny rules
//! name. Each is covered in the command's mount namespace: a directory by an empty read-only
//! tmpfs, a file by `/dev/null`.

use std::path::PathBuf;

/// The credential stores hidden unless the config says otherwise, relative to the home
/// directory: keys and tokens that a command has no business reading, and that a command
/// which can reach the network could send anywhere.
pub(crate) const DEFAULT_IN_HOME: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".pgpass",
    ".password-store",
    ".local/share/keyrings",
    ".vault-token",
    ".pypirc",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".gem/credentials",
    ".terraform.d/credentials.tfrc.json",
];

/// [`DEFAULT_IN_HOME`] under `$HOME`; none without a home.
pub(crate) fn default_paths() -> Vec<PathBuf> {
    let Some(home) = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|home| home.is_absolute())
    else {
        return Vec::new();
    };
    DEFAULT_IN_HOME.iter().map(|path| home.join(path)).collect()
}
