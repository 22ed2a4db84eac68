//! What a confined call's result says of its sandbox: `metadata.sandbox` (what was enforced,
//! what is degraded and why, what was hidden, removed or refused) and, for a command that
//! failed with the marks of a denial, a hint naming where it may write and how to ask for more.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::Confinement;

impl Confinement {
    /// `metadata.sandbox` for the call's result; `denial_hint` from [`Self::denial_hint`] when
    /// the command failed, `removed` from [`Self::undo_forbidden_creations`], `refused` the
    /// Unix sockets its connections to were refused.
    pub(crate) fn metadata(
        &self,
        denial_hint: Option<&str>,
        removed: &[PathBuf],
        refused: &[String],
    ) -> Value {
        let degraded: Vec<&str> = self.degraded.iter().map(|(name, _)| *name).collect();
        let mut metadata = json!({
            "mode": self.settings.mode.as_str(),
            "network": self.settings.network,
            "enforced": self.enforced,
            "degraded": degraded,
        });
        if !self.degraded.is_empty() {
            let why: serde_json::Map<String, Value> = self
                .degraded
                .iter()
                .map(|(name, why)| ((*name).to_owned(), json!(why)))
                .collect();
            metadata["why"] = Value::Object(why);
        }
        if !self.hidden.is_empty() {
            let paths: Vec<&Path> = self
                .hidden
                .iter()
                .map(|hidden| hidden.path.as_path())
                .collect();
            metadata["hidden"] = json!(paths);
        }
        if !self.reachable_sockets.is_empty() {
            metadata["unix_sockets"] = json!(self.reachable_sockets);
        }
        if !removed.is_empty() {
            metadata["removed"] = json!(removed);
        }
        if !refused.is_empty() {
            metadata["refused_sockets"] = json!(refused);
        }
        if let Some(hint) = denial_hint {
            metadata["likely_denied"] = json!(true);
            metadata["hint"] = json!(hint);
        }
        metadata
    }

    /// A hint for a command that failed with the marks of a denial, naming where it may
    /// write and the sockets it was refused; `None` when the output shows none or the command
    /// ran unconfined.
    pub(crate) fn denial_hint(&self, output: &str, refused: &[String]) -> Option<String> {
        let offline = !self.settings.network && looks_offline(output);
        let git = git_metadata_denied(output);
        if !self.is_confined()
            || !looks_denied(output) && git.is_none() && !offline && refused.is_empty()
        {
            return None;
        }
        let dirs: Vec<String> = self
            .writable_shown
            .iter()
            .map(|dir| dir.display().to_string())
            .collect();
        let network = if self.settings.network {
            ""
        } else {
            " IP networking is off for this session's commands (name lookups fail too): if the \
             command needs it (a package download, `git push`), run it again with escalate \
             {\"network\": true} and a justification, and the user is asked."
        };
        let sockets = if refused.is_empty() {
            String::new()
        } else {
            format!(
                " Connections to Unix sockets the command does not serve itself were refused \
                 ({}): a server outside the sandbox would act for it. Run it again with escalate \
                 {{\"unsandboxed\": true}} and a justification if the user's config allows it, \
                 or the user can name the socket in [sandbox] unix_sockets.",
                refused.join(", ")
            )
        };
        if let Some(file) = git {
            // Where it may write is beside the point: this file is kept whatever the command.
            return Some(format!(
                "the sandbox (mode {}) keeps {file} read-only: git runs what a repository's \
                 .git/config and .git/hooks name, so a command that changed them could run code \
                 outside the sandbox the next time anyone runs git. Ask the user to make this \
                 change (they can run the command in their own terminal), or run it again with \
                 escalate {{\"unsandboxed\": true}} and a justification if the user's config \
                 allows it, and the user is asked.{network}{sockets}",
                self.settings.mode.as_str()
            ));
        }
        let writes = if looks_denied(output) {
            let dir = denied_dir(output).map_or_else(
                || "DIR".to_owned(),
                |dir| dir.display().to_string().replace('"', "\\\""),
            );
            format!(
                " If it must write elsewhere, run it again with escalate {{\"writable\": \
                 [\"{dir}\"]}} (an existing directory it writes under) and a justification, and \
                 the user is asked."
            )
        } else {
            String::new()
        };
        Some(format!(
            "the sandbox (mode {}) may have denied this: commands may write only under \
             {}.{writes}{network}{sockets}",
            self.settings.mode.as_str(),
            dirs.join(", ")
        ))
    }
}

/// The existing directory that holds the path a denial in `output` names (`touch: cannot
/// touch '/x/y': Read-only file system`, `bash: line 1: /x/y: Permission denied`): what an
/// escalation would have to make writable. The path is the one just before the denial's words
/// (not the program's own name that starts the line), or one in quotes.
fn denied_dir(output: &str) -> Option<PathBuf> {
    let line = output.lines().find(|line| looks_denied(line))?;
    let segments: Vec<&str> = line.split(": ").map(str::trim).collect();
    let before_mark = segments
        .iter()
        .position(|segment| looks_denied(segment))
        .and_then(|at| at.checked_sub(1))
        .map(|at| segments[at].trim_matches(['\'', '"', '`']))
        .filter(|segment| segment.starts_with('/'));
    let quoted = || {
        line.split(['\'', '`', '"'])
            .skip(1)
            .step_by(2)
            .find(|part| part.starts_with('/'))
    };
    let path = before_mark.or_else(quoted)?;
    Path::new(path)
        .ancestors()
        .skip(1)
        .find(|dir| dir.is_dir())
        .map(Path::to_path_buf)
}

/// The git metadata file a failure in `output` names, when the failure is the sandbox's
/// keeping it read-only: a line with a denial's words (or `Device or resource busy`, which a
/// rename onto the file's read-only mount gets: `git config` writes `config.lock` and renames
/// it) that names `.git/config` or a file of `.git/hooks`.
fn git_metadata_denied(output: &str) -> Option<&'static str> {
    output.lines().find_map(|line| {
        let denied = looks_denied(line) || line.contains("Device or resource busy");
        if !denied {
            return None;
        }
        if line.contains(".git/hooks") || line.contains("/hooks/") && line.contains(".git") {
            Some(".git/hooks")
        } else if line.contains(".git/config") || line.contains("config file .git") {
            Some(".git/config")
        } else {
            None
        }
    })
}

/// Whether `output` reads like a program that found no network: a name that did not resolve,
/// an unreachable network, in the words of curl, git, glibc, Python, Node and Go. With the
/// network off, the sandbox is why.
fn looks_offline(output: &str) -> bool {
    const MARKS: [&str; 6] = [
        "Could not resolve host",
        "Temporary failure in name resolution",
        "EAI_AGAIN",
        "Name or service not known",
        "Network is unreachable",
        "ENETUNREACH",
    ];
    MARKS.iter().any(|mark| output.contains(mark))
}

/// Whether a failed command's output carries the marks of a denied write or connect: the
/// messages of `EACCES`, `EPERM` and `EROFS` as libc, Python, Rust and Node print them.
fn looks_denied(output: &str) -> bool {
    const MARKS: [&str; 6] = [
        "Permission denied",
        "Read-only file system",
        "Operation not permitted",
        "EACCES",
        "EROFS",
        "EPERM",
    ];
    MARKS.iter().any(|mark| output.contains(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_on_git_metadata_names_the_file_kept() {
        for (output, kept) in [
            (
                "error: could not write config file .git/config: Device or resource busy",
                ".git/config",
            ),
            (
                "error: could not lock config file .git/config: Read-only file system",
                ".git/config",
            ),
            (
                "PermissionError: [Errno 30] Read-only file system: '.git/hooks/pre-push'",
                ".git/hooks",
            ),
            (
                "touch: cannot touch '/p/.git/hooks/x': Read-only file system",
                ".git/hooks",
            ),
        ] {
            assert_eq!(git_metadata_denied(output), Some(kept), "{output}");
        }
        for output in [
            "touch: cannot touch '/etc/x': Permission denied",
            "fatal: not a git repository: .git/config missing",
            "error: could not write config file .git/config: No space left on device",
        ] {
            assert_eq!(git_metadata_denied(output), None, "{output}");
        }
    }

    #[test]
    fn denials_are_recognised_in_the_words_of_common_runtimes() {
        assert!(looks_denied("touch: cannot touch '/x': Permission denied"));
        assert!(looks_denied(
            "OSError: [Errno 30] Read-only file system: '/x'"
        ));
        assert!(looks_denied("Error: EACCES: permission denied, open '/x'"));
        assert!(!looks_denied("error[E0425]: cannot find value `x`"));
        assert!(looks_offline(
            "curl: (6) Could not resolve host: example.com"
        ));
        assert!(looks_offline(
            "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>"
        ));
        assert!(looks_offline(
            "Error: getaddrinfo EAI_AGAIN registry.npmjs.org"
        ));
        assert!(!looks_offline("error: could not find `Cargo.toml`"));
    }

    #[test]
    fn the_denied_path_is_the_one_before_the_denial_not_the_program() {
        let tmp = std::env::temp_dir();
        let inside = tmp.join("x.txt");
        for line in [
            format!(
                "/bin/bash: line 1: {}: Read-only file system",
                inside.display()
            ),
            format!(
                "touch: cannot touch '{}': Read-only file system",
                inside.display()
            ),
        ] {
            assert_eq!(denied_dir(&line).as_deref(), Some(tmp.as_path()), "{line}");
        }
        assert_eq!(denied_dir("/bin/bash: line 1: x: Permission denied"), None);
    }
}
