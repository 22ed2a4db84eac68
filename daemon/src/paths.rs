//! Path arguments in their two forms: lexical (as written) and resolved (as the kernel sees it),
//! and whether each lies inside the session roots.
//!
//! The permission engine judges a path on both forms: a deny matches if either does, an allow
//! holds only if both do. The file tools operate on the resolved form, so a write through a
//! symlink replaces the target and keeps the link.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// How many symlinks one resolution follows before it gives up, as the kernel's `ELOOP`.
const MAX_SYMLINK_HOPS: usize = 40;

/// A path argument made absolute, in both forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// The argument as written.
    pub raw: String,
    /// Made absolute against the cwd, `~` expanded, `.` and `..` collapsed; no filesystem access.
    pub lexical: PathBuf,
    /// Every symlink followed, including a dangling last component; components past the
    /// first missing one are appended as written.
    pub resolved: PathBuf,
    pub lexical_inside_roots: bool,
    pub resolved_inside_roots: bool,
    /// Writing here can make code run later (git's config and hooks, see
    /// [`makes_code_run`]); set by the caller for the paths a call writes, `false` otherwise.
    pub makes_code_run: bool,
}

impl ResolvedPath {
    /// Both forms lie inside the roots: what "inside" means for allows and grants.
    pub fn inside_roots(&self) -> bool {
        self.lexical_inside_roots && self.resolved_inside_roots
    }
}

/// Resolves `raw` against `cwd` and judges both forms against `roots`. The roots are taken as
/// they are, never resolved again: a session's roots are made canonical once, when the session
/// is created or updated, so that a root repointed later (a symlink swapped in for it or for a
/// directory above it) cannot move what counts as inside.
pub fn resolve(raw: &str, cwd: &Path, roots: &[PathBuf]) -> ResolvedPath {
    let absolute = absolute(raw, cwd);
    let lexical = normalize_lexically(&absolute);
    let resolved = resolve_symlinks(&absolute);
    let lexical_inside_roots = roots
        .iter()
        .any(|root| lexical.starts_with(normalize_lexically(root)));
    let resolved_inside_roots = roots.iter().any(|root| resolved.starts_with(root));
    ResolvedPath {
        raw: raw.to_owned(),
        lexical,
        resolved,
        lexical_inside_roots,
        resolved_inside_roots,
        makes_code_run: false,
    }
}

/// Whether writing `path` (either form) can make code run later, when a command the rules
/// allow (`git status`) reads what was written: git's `config` (`core.fsmonitor`,
/// `core.pager`, aliases), `hooks/`, and `commondir`/`gitdir` (where git finds the config), in
/// any git directory, and a `HEAD` anywhere (what makes a directory a repository) (`.git`, a bare `*.git`, a
/// submodule's `.git/modules/…`, a worktree's `.git/worktrees/…`, or a directory a `.git`
/// file in `git_dirs` names), and a `.git` entry itself (a `.git` file says which directory git
/// reads). `git_dirs` are the git directories named by `.git` files ([`git_dirs_named_by_files`]).
///
/// Also any path in toold's own directories ([`protect_daemon_dirs`]): its config (rules and
/// hooks it runs), its state (the saved sessions' rules) and its runtime directory (the socket
/// every client trusts).
pub(crate) fn makes_code_run(path: &ResolvedPath, git_dirs: &[PathBuf]) -> bool {
    [&path.lexical, &path.resolved].into_iter().any(|form| {
        // In one of them, or one of them is inside: a directory above them, written by a
        // recursive copy or removed, changes them too.
        daemon_files().iter().any(|dir| form.starts_with(dir) || dir.starts_with(form)) ||
        // Without a `HEAD` no directory is a repository to git: guarding it keeps a directory
        // made to look like one (`config` with `core.pager`, `objects/`, `refs/`, then
        // `cd dir && git log`) from ever becoming one.
        form.file_name().is_some_and(|name| name == "HEAD")
            || in_a_git_dir(form)
            || git_dirs
                .iter()
                .any(|dir| form.strip_prefix(dir).is_ok_and(runs_code_in_git_dir))
    })
}

/// `path` as text that names it exactly, for keys such as a session's grants: as it is when it
/// is UTF-8 without a backslash; else each backslash written `\\` and each byte that is not
/// UTF-8 `\xHH`. Two paths never share a text, which a lossy display cannot promise (every
/// invalid byte shows as U+FFFD).
pub(crate) fn exact_text(path: &Path) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    let bytes = path.as_os_str().as_encoded_bytes();
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.contains('\\') => text.into(),
        _ => {
            let mut exact = String::with_capacity(bytes.len() + 8);
            for chunk in bytes.utf8_chunks() {
                exact.push_str(&chunk.valid().replace('\\', "\\\\"));
                for byte in chunk.invalid() {
                    let _ = write!(exact, "\\x{byte:02x}");
                }
            }
            exact.into()
        }
    }
}

/// toold's own configuration, state and runtime directories, as given and resolved, and its
/// config file, set once by the daemon at start ([`protect_daemon_dirs`]).
static DAEMON_DIRS: std::sync::OnceLock<DaemonFiles> = std::sync::OnceLock::new();

#[derive(Debug, Default)]
struct DaemonFiles {
    dirs: Vec<PathBuf>,
    config_file: Option<PathBuf>,
}

/// Protects `dirs` (toold's config, state and runtime directories) and `config_file` for the
/// life of the process: a write into any of them asks as a write to `.git/config` does. The
/// first call wins; the daemon makes it once, before it serves.
pub(crate) fn protect_daemon_dirs(
    dirs: impl IntoIterator<Item = PathBuf>,
    config_file: Option<PathBuf>,
) {
    let mut protected = Vec::new();
    for dir in dirs {
        let lexical = normalize_lexically(&dir);
        let resolved = resolve_symlinks(&lexical);
        if resolved != lexical {
            protected.push(resolved);
        }
        protected.push(lexical);
    }
    let _ = DAEMON_DIRS.set(DaemonFiles {
        dirs: protected,
        config_file: config_file.map(|file| normalize_lexically(&file)),
    });
}

/// toold's own directories as [`protect_daemon_dirs`] set them (none before).
pub(crate) fn daemon_dirs() -> &'static [PathBuf] {
    DAEMON_DIRS.get().map_or(&[], |files| files.dirs.as_slice())
}

/// toold's own directories and config file as they are now: the directories, and the config
/// file as named and as it resolves — a config file that is a symlink (dotfiles managed with
/// stow) is protected by what it leads to as well as by its name, looked up again each time
/// (the link may be repointed).
pub(crate) fn daemon_files() -> Vec<PathBuf> {
    let Some(files) = DAEMON_DIRS.get() else {
        return Vec::new();
    };
    let mut all = files.dirs.clone();
    if let Some(file) = &files.config_file {
        let resolved = resolve_symlinks(file);
        if !all.iter().any(|dir| file.starts_with(dir)) {
            all.push(file.clone());
        }
        if !all.iter().any(|dir| resolved.starts_with(dir)) {
            all.push(resolved);
        }
    }
    all
}

/// The part of `path` after its last git directory component, judged.
fn in_a_git_dir(path: &Path) -> bool {
    let components: Vec<&std::ffi::OsStr> = path.iter().collect();
    let Some(at) = components.iter().rposition(|name| {
        let name = name.as_encoded_bytes();
        name == b".git" || name.ends_with(b".git")
    }) else {
        return false;
    };
    let rest: PathBuf = components[at + 1..].iter().collect();
    if rest.as_os_str().is_empty() {
        // Writing `.git` itself (a `.git` file names the directory git reads); a file that
        // merely ends in `.git` is no git directory.
        return components[at] == ".git";
    }
    runs_code_in_git_dir(&rest)
}

/// Inside a git directory: `config` (and `config.worktree`, `config.lock` git renames into
/// place) anywhere, everything under a `hooks` directory, and `commondir` and `gitdir`, which
/// tell git where the rest of the repository, its config included, is (`echo ../evil >
/// .git/commondir` makes git read `../evil/config`).
fn runs_code_in_git_dir(rest: &Path) -> bool {
    let last_names_config = rest.file_name().is_some_and(|name| {
        let name = name.as_encoded_bytes();
        name.starts_with(b"config") || name.starts_with(b"commondir") || name.starts_with(b"gitdir")
    });
    last_names_config || rest.iter().any(|name| name == "hooks")
}

/// The git directories that `.git` files name (`gitdir: …`, as a worktree or a submodule
/// has), for the repositories of `dirs` (each directory and its ancestors, up to the first
/// `.git` found): these can live anywhere, under any name.
pub(crate) fn git_dirs_named_by_files(dirs: &[&Path]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in dirs {
        for ancestor in dir.ancestors() {
            let dot_git = ancestor.join(".git");
            let Ok(metadata) = std::fs::symlink_metadata(&dot_git) else {
                continue;
            };
            if metadata.is_file()
                && let Some(target) = gitdir_of(&dot_git, ancestor)
                && !found.contains(&target)
            {
                found.push(target);
            }
            // The nearest `.git` is the repository git uses here.
            break;
        }
    }
    found
}

/// The directory a `.git` file names, resolved; `None` for anything else.
fn gitdir_of(dot_git: &Path, repository: &Path) -> Option<PathBuf> {
    let absolute = named_by_git_file(repository, dot_git)?;
    Some(resolve_symlinks(&normalize_lexically(&absolute)))
}

/// The git directory a `.git` file (`gitdir: PATH`, as worktrees and submodules have) in `dir`
/// names, relative ones taken from `dir`; `None` when it is not such a file.
pub(crate) fn named_by_git_file(dir: &Path, dot_git: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(dot_git)
        .ok()?
        .take(4096)
        .read_to_string(&mut text)
        .ok()?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    Some(dir.join(named))
}

/// `raw` made absolute: `~` and `~/…` from `$HOME`, anything relative from `cwd`.
pub fn absolute(raw: &str, cwd: &Path) -> PathBuf {
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    if raw == "~"
        && let Some(home) = home()
    {
        return home;
    }
    if let Some(rest) = raw.strip_prefix("~/")
        && let Some(home) = home()
    {
        // `~//x` is `$HOME//x` to a shell; `join` would take the absolute `/x` instead.
        return home.join(rest.trim_start_matches('/'));
    }
    let path = Path::new(raw);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// Collapses `.` and `..` without touching the filesystem; `..` at the root stays at the root.
pub fn normalize_lexically(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// Follows every symlink in an absolute path as the kernel would, `..` after a symlink
/// included, and a dangling symlink at the end too. Stops following at the first component
/// that does not exist (nothing below it can be a symlink) or after too many hops.
pub fn resolve_symlinks(path: &Path) -> PathBuf {
    let mut pending: Vec<OsString> = Vec::new();
    push_components_reversed(path, &mut pending);
    let mut current = PathBuf::from("/");
    let mut hops = 0;
    let mut missing = false;
    while let Some(name) = pending.pop() {
        if name == "." {
            continue;
        }
        if name == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&name);
        if missing {
            current = next;
            continue;
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() && hops < MAX_SYMLINK_HOPS => {
                hops += 1;
                match std::fs::read_link(&next) {
                    Ok(target) => {
                        if target.is_absolute() {
                            current = PathBuf::from("/");
                        }
                        push_components_reversed(&target, &mut pending);
                    }
                    Err(_) => current = next,
                }
            }
            Ok(_) => current = next,
            Err(_) => {
                missing = true;
                current = next;
            }
        }
    }
    current
}

/// Pushes `path`'s components so that popping yields them in order.
fn push_components_reversed(path: &Path, pending: &mut Vec<OsString>) {
    let start = pending.len();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {}
            Component::CurDir => pending.push(".".into()),
            Component::ParentDir => pending.push("..".into()),
            Component::Normal(name) => pending.push(name.to_os_string()),
        }
    }
    pending[start..].reverse();
}

/// toold's state directory, `$XDG_STATE_HOME/toold` (else `~/.local/state/toold`): its saved
/// sessions, its audit log, its MCP servers' logs. `None` when neither variable gives an
/// absolute directory (the XDG spec says a relative value is invalid and ignored; an empty one
/// counts as unset).
pub(crate) fn toold_state_dir() -> Option<PathBuf> {
    toold_state_dir_from(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

/// [`toold_state_dir`] from the two variables' values.
pub(crate) fn toold_state_dir_from(
    xdg_state_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    let absolute = |value: Option<std::ffi::OsString>| {
        value.map(PathBuf::from).filter(|path| path.is_absolute())
    };
    let state_home = absolute(xdg_state_home)
        .or_else(|| absolute(home).map(|home| home.join(".local").join("state")))?;
    Some(state_home.join("toold"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn lexical_form_collapses_dots_without_touching_the_disk() {
        let cwd = Path::new("/work/project");
        let roots = [cwd.to_path_buf()];
        let judged = resolve("src/../a/./b", cwd, &roots);
        assert_eq!(judged.lexical, PathBuf::from("/work/project/a/b"));
        assert!(judged.lexical_inside_roots);
        let escape = resolve("../../etc/passwd", cwd, &roots);
        assert_eq!(escape.lexical, PathBuf::from("/etc/passwd"));
        assert!(!escape.lexical_inside_roots && !escape.inside_roots());
        assert_eq!(normalize_lexically(Path::new("/../..")), PathBuf::from("/"));
    }

    #[test]
    fn a_root_prefix_that_is_not_a_parent_is_outside() {
        let cwd = Path::new("/work/project");
        let judged = resolve("/work/project-other/x", cwd, &[cwd.to_path_buf()]);
        assert!(!judged.lexical_inside_roots);
    }

    #[test]
    fn symlink_inside_the_root_to_a_file_outside_is_outside_when_resolved() {
        let (_keep, base) = tree();
        let root = base.join("root");
        let outside = base.join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "x").unwrap();
        symlink(outside.join("secret"), root.join("link")).unwrap();
        let judged = resolve("link", &root, std::slice::from_ref(&root));
        assert_eq!(judged.lexical, root.join("link"));
        assert_eq!(judged.resolved, outside.join("secret"));
        assert!(judged.lexical_inside_roots);
        assert!(!judged.resolved_inside_roots);
        assert!(!judged.inside_roots());
    }

    #[test]
    fn dangling_symlink_resolves_to_its_missing_target() {
        let (_keep, base) = tree();
        let root = base.join("root");
        std::fs::create_dir_all(&root).unwrap();
        symlink(base.join("elsewhere/new.txt"), root.join("dangling")).unwrap();
        let judged = resolve("dangling", &root, std::slice::from_ref(&root));
        assert_eq!(judged.resolved, base.join("elsewhere/new.txt"));
        assert!(!judged.resolved_inside_roots);
    }

    #[test]
    fn relative_symlink_and_dotdot_after_it_follow_the_kernel() {
        let (_keep, base) = tree();
        std::fs::create_dir_all(base.join("a/deep/er")).unwrap();
        std::fs::create_dir_all(base.join("b")).unwrap();
        symlink("../a/deep/er", base.join("b/link")).unwrap();
        // b/link/.. is a/deep for the kernel, not b.
        let judged = resolve("b/link/../file", &base, std::slice::from_ref(&base));
        assert_eq!(judged.resolved, base.join("a/deep/file"));
        assert_eq!(judged.lexical, base.join("b/file"));
    }

    #[test]
    fn symlink_loops_end() {
        let (_keep, base) = tree();
        symlink(base.join("loop2"), base.join("loop1")).unwrap();
        symlink(base.join("loop1"), base.join("loop2")).unwrap();
        let judged = resolve("loop1", &base, std::slice::from_ref(&base));
        assert!(judged.resolved.starts_with(&base));
    }

    #[test]
    fn exact_text_names_one_path_only() {
        use std::os::unix::ffi::OsStrExt;
        let of =
            |bytes: &[u8]| exact_text(Path::new(std::ffi::OsStr::from_bytes(bytes))).into_owned();
        assert_eq!(of(b"/a/b c"), "/a/b c");
        assert_eq!(of(b"/a\xff"), "/a\\xff");
        assert_eq!(of(b"/a\xfe"), "/a\\xfe");
        // A backslash is escaped too, so a name spelling `\xff` is not the byte.
        assert_eq!(of(b"/a\\xff"), "/a\\\\xff");
        assert_eq!(of(b"/\xc3\xa9\xc3"), "/\u{e9}\\xc3");
    }

    #[test]
    fn roots_are_taken_as_given_never_resolved_again() {
        let (_keep, base) = tree();
        std::fs::create_dir_all(base.join("real")).unwrap();
        symlink(base.join("real"), base.join("alias")).unwrap();
        let alias = base.join("alias");
        let real = base.join("real");
        // A canonical root (what sessions hold) covers paths reached through a link to it.
        let judged = resolve("file", &alias, std::slice::from_ref(&real));
        assert_eq!(judged.resolved, base.join("real/file"));
        assert!(judged.resolved_inside_roots);
        let judged = resolve("file", &real, std::slice::from_ref(&real));
        assert!(judged.inside_roots());
        // A root that is a link is not followed at judging time: where it points could change.
        let judged = resolve("file", &alias, std::slice::from_ref(&alias));
        assert!(!judged.resolved_inside_roots);
    }

    #[test]
    fn home_is_expanded() {
        let home = PathBuf::from(std::env::var_os("HOME").unwrap());
        assert_eq!(absolute("~/x", Path::new("/cwd")), home.join("x"));
        assert_eq!(absolute("~", Path::new("/cwd")), home);
        assert_eq!(absolute("~//etc/x", Path::new("/cwd")), home.join("etc/x"));
        assert_eq!(absolute("~x", Path::new("/cwd")), PathBuf::from("/cwd/~x"));
    }
}
