//! The command-line analysis against real bash: a line run by `/bin/bash` under strace, with a
//! `PATH` of stubs in a scratch tree, what it executed, looked up and wrote, and where that
//! differs from what the permission engine allowed it on (the analysis's commands and written
//! paths). Shared by `tests/tests/bash_differential.rs` and the `bash_differential` fuzz target,
//! which includes this file with `#[path]`: it uses only std, tempfile, serde_json, toold and
//! toold_protocol, so that the fuzz crate gains no dependency on this one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use toold::Env;
use toold::paths::{ResolvedPath, normalize_lexically};
use toold::permission::facts::{AnalysedLine, command_facts};
use toold::permission::{CallFacts, Decision, HookVerdict, Policy, SessionFacts, evaluate};
use toold::shell::CommandLine;
use toold_protocol::{Rules, Safety, SessionMode};

/// The allow rules of the issue (and of the `command_line` fuzz target): a line these allow
/// must run nothing but `echo` and `git status` and write nothing outside the root.
pub const ALLOW_RULES: &[&str] = &["run_command(echo *)", "run_command(git status)"];

/// The programs the allow rules name: in the stub directory, each a link to `true`, which runs
/// nothing and writes nothing (`echo` is a bash builtin, but `env echo` runs it from `PATH`).
pub const STUBBED: &[&str] = &["echo", "git"];

/// Wrappers the analysis sees through (daemon/src/shell/wrappers.rs): linked into the stub
/// directory as the real programs, so that what they run is traced too (`env -S 'touch P' echo`
/// really tries `touch`). Those the machine lacks are left out: bash then just looks them up.
pub const REAL_WRAPPERS: &[&str] = &[
    "env", "nice", "timeout", "nohup", "stdbuf", "setsid", "ionice", "xargs",
];

/// How long a line may run before its whole process group is killed.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// The system calls traced: program runs, writes, the cwd and process creation (to resolve
/// relative paths), and the `stat`/`access` calls with which bash searches `PATH` (a command
/// bash looks for in the stub directory but does not find runs nothing, yet it is a program
/// the line tried to run). `?` keeps strace quiet about calls an architecture lacks.
const TRACED: &str = "trace=execve,execveat,?open,openat,?openat2,?creat,truncate,?rename,\
    renameat,?renameat2,?unlink,unlinkat,?mkdir,mkdirat,?link,linkat,?symlink,symlinkat,\
    chdir,fchdir,clone,?clone3,?fork,?vfork,?stat,?lstat,?newfstatat,?statx,?access,\
    ?faccessat,?faccessat2";

/// Files that anything may write: a redirection to them changes nothing on disk.
const HARMLESS: &[&str] = &["/dev/null", "/dev/tty", "/dev/stdout", "/dev/stderr"];

/// The stub directory, made once and shared by every scratch tree (nothing writes to it).
pub struct Stubs {
    _dir: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Stubs {
    pub fn new() -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("toold-stubs").tempdir()?;
        let path = dir.path().canonicalize()?;
        let true_program = find_program("true").unwrap_or_else(|| PathBuf::from("/bin/true"));
        for name in STUBBED {
            std::os::unix::fs::symlink(&true_program, path.join(name))?;
        }
        for name in REAL_WRAPPERS {
            if let Some(real) = find_program(name) {
                std::os::unix::fs::symlink(real, path.join(name))?;
            }
        }
        if running_as_root(&path) {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Self {
            _dir: dir,
            dir: path,
        })
    }
}

/// Whether this process runs as root: `dir`, which it just created, is root's.
fn running_as_root(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|metadata| metadata.uid() == 0)
}

/// `name` on this process's `PATH`.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// One line's scratch tree: `root/` (the session root and bash's cwd, with files, a directory
/// and links that lead out of it, so that a glob or a link can lead a write astray),
/// `outside/` (where those links lead), `home/` (`HOME`, outside the root), `tmp/` (`TMPDIR`,
/// where bash puts large here-documents) and `trace/` (strace's output).
pub struct Scratch {
    _dir: tempfile::TempDir,
    pub top: PathBuf,
    pub root: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub stubs: PathBuf,
}

impl Scratch {
    pub fn new(stubs: &Stubs) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("toold-bash").tempdir()?;
        let top = dir.path().canonicalize()?;
        let root = top.join("root");
        for sub in ["root/sub", "outside", "home", "tmp", "trace"] {
            std::fs::create_dir_all(top.join(sub))?;
        }
        for file in ["a.txt", "b.txt", "sub/c.txt"] {
            std::fs::write(root.join(file), "x\n")?;
        }
        std::fs::write(top.join("outside/target"), "x\n")?;
        // A repository's config: writing it makes `git status` (allowed) run code.
        std::fs::create_dir_all(root.join(".git"))?;
        std::fs::write(root.join(".git/config"), "")?;
        std::os::unix::fs::symlink("../outside/target", root.join("link"))?;
        std::os::unix::fs::symlink("../outside", root.join("dirlink"))?;
        // As root, bash runs as `nobody` (strace's `-u`), so that a line the analysis misreads
        // cannot write outside the scratch tree: the tree is open to it, and its top is only
        // searchable.
        if running_as_root(&top) {
            use std::os::unix::fs::PermissionsExt;
            let open = std::fs::Permissions::from_mode(0o777);
            for sub in ["root", "root/sub", "root/.git", "outside", "home", "tmp"] {
                std::fs::set_permissions(top.join(sub), open.clone())?;
            }
            std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(Self {
            _dir: dir,
            home: top.join("home"),
            tmp: top.join("tmp"),
            stubs: stubs.dir.clone(),
            root,
            top,
        })
    }
}

/// What the permission engine made of a line in a scratch tree.
pub struct Judged {
    pub decision: Decision,
    pub analysis: Arc<CommandLine>,
    /// The analysis's written paths, judged from the root (`~` is the scratch home).
    pub written: Vec<ResolvedPath>,
}

impl Judged {
    pub fn allowed(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// Judges `line` as the `command_line` fuzz target does: a `run_command` call in the default
/// mode under [`ALLOW_RULES`] compiled for the scratch root, whose `HOME` is the scratch home.
pub fn judge(line: &str, scratch: &Scratch) -> Judged {
    let rules = Rules {
        allow: ALLOW_RULES.iter().map(|rule| (*rule).to_owned()).collect(),
        ..Rules::default()
    };
    let policy = Policy::compile([&rules], &scratch.root, &scratch.root).expect("the rules parse");
    let mut env = Env::new(&scratch.root);
    env.command_env
        .insert("HOME".to_owned(), scratch.home.display().to_string());
    let mut arguments = Map::new();
    arguments.insert("command".to_owned(), Value::from(line));
    let analysed = AnalysedLine::here(line);
    let facts = command_facts("run_command", &arguments, &env, Some(&analysed))
        .expect("run_command has facts");
    let call = CallFacts {
        tool: "run_command",
        safety: Safety::SideEffect,
        system: false,
        arguments: &arguments,
        paths: &[],
        command: Some(&facts),
        hook: HookVerdict::Silent,
    };
    let decision = evaluate(
        &call,
        &SessionFacts {
            mode: SessionMode::Default,
            policy: &policy,
            grants: &[],
            // Judged by the rules alone, as where the sandbox does not confine.
            confined: false,
        },
    )
    .decision;
    Judged {
        decision,
        analysis: facts.analysis.clone(),
        written: facts.written.clone(),
    }
}

/// A program run (or tried: a failed `execve` is still an attempt).
#[derive(Debug, Clone)]
pub struct Exec {
    pub pid: u32,
    pub path: PathBuf,
    pub argv: Vec<String>,
    pub ok: bool,
}

/// A file opened for writing, created, truncated, renamed, removed or linked.
#[derive(Debug, Clone)]
pub struct Write {
    pub pid: u32,
    pub syscall: String,
    /// Absolute, `.` and `..` collapsed, links not followed: as the engine's `lexical`.
    pub path: PathBuf,
    /// What the kernel opened (strace's `-y`), when the call returned a descriptor.
    pub opened: Option<String>,
    pub ok: bool,
}

/// What bash did with a line.
#[derive(Debug, Default)]
pub struct Trace {
    pub execs: Vec<Exec>,
    pub writes: Vec<Write>,
    /// Names bash searched for in the stub directory (the only directory on its `PATH`).
    pub lookups: BTreeSet<String>,
    pub timed_out: bool,
    /// Whether the harness's bash was seen to start: without it, nothing was traced.
    pub bash_started: bool,
    /// The start of bash's (and strace's) standard error.
    pub stderr: String,
}

/// Runs `line` under bash in `scratch` and traces it. An error when strace could not trace
/// at all (not installed, ptrace not permitted), with what strace said.
pub fn trace(line: &str, scratch: &Scratch) -> Result<Trace, String> {
    let trace_dir = scratch.top.join("trace");
    let stderr_path = scratch.top.join("stderr");
    let stderr_file = std::fs::File::create(&stderr_path).map_err(|error| error.to_string())?;
    // `timeout` runs strace in a process group of its own and kills the whole group at the
    // deadline: bash, its children and strace, so that no line hangs the test.
    let mut command = Command::new("timeout");
    command
        .arg("-s")
        .arg("KILL")
        .arg(format!("{}", DEADLINE.as_secs()))
        .args([
            "strace", "-f", "-ff", "-qq", "-y", "-xx", "-s", "65536", "-e",
        ])
        .arg(TRACED);
    if running_as_root(&scratch.top) {
        command.args(["-u", "nobody"]);
    }
    let status = command
        .arg("-o")
        .arg(trace_dir.join("t"))
        .args(["env", "-i"])
        .arg(format!("PATH={}", scratch.stubs.display()))
        .arg(format!("HOME={}", scratch.home.display()))
        .arg(format!("TMPDIR={}", scratch.tmp.display()))
        .args(["/bin/bash", "--noprofile", "--norc", "-c", line])
        .current_dir(&scratch.root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr_file)
        .status()
        .map_err(|error| format!("cannot run timeout/strace: {error}"))?;
    let mut stderr = String::new();
    if let Ok(file) = std::fs::File::open(&stderr_path) {
        let mut bytes = Vec::new();
        let _ = file.take(4096).read_to_end(&mut bytes);
        stderr = String::from_utf8_lossy(&bytes).into_owned();
    }
    let mut parsed = parse_traces(&trace_dir, &scratch.root, &scratch.stubs).map_err(|error| {
        format!("strace left no readable trace ({error}); status {status}; it said: {stderr}")
    })?;
    parsed.timed_out = status.code() == Some(137) || status.code() == Some(124);
    if !parsed.bash_started && !parsed.timed_out {
        return Err(format!(
            "strace did not trace bash (is ptrace permitted?); status {status}; it said: {stderr}"
        ));
    }
    parsed.stderr = stderr;
    Ok(parsed)
}

/// Reads strace's per-process files (`t.PID`), each process starting in the cwd its parent
/// had when it forked: the first process (the one no other created) in the root, and so is
/// any process whose parent was killed before its fork returned.
fn parse_traces(dir: &Path, root: &Path, stubs: &Path) -> Result<Trace, String> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(|error| error.to_string())? {
        let entry = entry.map_err(|error| error.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name
            .strip_prefix("t.")
            .and_then(|pid| pid.parse::<u32>().ok())
        {
            files.insert(pid, entry.path());
        }
    }
    let created = created_processes(&files)?;
    let mut order: Vec<u32> = files
        .keys()
        .copied()
        .filter(|pid| !created.contains(pid))
        .collect();
    order.extend(
        created
            .iter()
            .copied()
            .filter(|pid| files.contains_key(pid)),
    );
    let Some(&first) = order.first() else {
        return Err("no trace file".to_owned());
    };
    let mut trace = Trace::default();
    let mut parsed = BTreeSet::new();
    for start in order {
        let mut queue = vec![(start, root.to_owned())];
        while let Some((pid, cwd)) = queue.pop() {
            if !parsed.insert(pid) {
                continue;
            }
            let context = Context {
                pid,
                cwd,
                wrapper: pid == first,
                stubs,
            };
            for (child, cwd) in parse_process(&files[&pid], &context, &mut trace)? {
                if files.contains_key(&child) {
                    queue.push((child, cwd));
                }
            }
        }
    }
    Ok(trace)
}

/// The pids that traced processes created (a first pass over every file).
fn created_processes(files: &BTreeMap<u32, PathBuf>) -> Result<BTreeSet<u32>, String> {
    let mut created = BTreeSet::new();
    for file in files.values() {
        let reader = BufReader::new(std::fs::File::open(file).map_err(|error| error.to_string())?);
        for line in reader.lines() {
            let line = line.map_err(|error| error.to_string())?;
            let forks = [
                "clone(",
                "clone3(",
                "fork(",
                "vfork(",
                "<... clone",
                "<... vfork",
            ]
            .iter()
            .any(|start| line.starts_with(start));
            if let Some((_, ret)) = line.rsplit_once(") = ").filter(|_| forks)
                && let Ok(child) = ret.trim().parse::<u32>()
            {
                created.insert(child);
            }
        }
    }
    Ok(created)
}

/// What parsing one process's file starts from.
struct Context<'a> {
    pid: u32,
    cwd: PathBuf,
    /// The first process, whose first two programs (`env`, then bash) are the harness's.
    wrapper: bool,
    stubs: &'a Path,
}

/// One process's file; returns the children it created and the cwd each started in.
fn parse_process(
    file: &Path,
    process: &Context<'_>,
    trace: &mut Trace,
) -> Result<Vec<(u32, PathBuf)>, String> {
    let reader = BufReader::new(std::fs::File::open(file).map_err(|error| error.to_string())?);
    let mut cwd = process.cwd.clone();
    let mut children = Vec::new();
    let mut harness_execs = if process.wrapper { 2 } else { 0 };
    let mut held: Option<String> = None;
    for raw in reader.lines() {
        let raw = raw.map_err(|error| error.to_string())?;
        // A call interrupted (by a signal, a vfork) comes in two lines: its start, then
        // `<... NAME resumed>` and the rest.
        if let Some(start) = raw.strip_suffix(" <unfinished ...>") {
            held = Some(start.to_owned());
            continue;
        }
        let line = match (raw.strip_prefix("<... "), held.take()) {
            (Some(rest), Some(start)) => match rest.split_once(" resumed>") {
                Some((_, tail)) => format!("{start}{tail}"),
                None => continue,
            },
            (Some(_), None) => continue,
            (None, _) => raw,
        };
        let Some(call) = Call::parse(&line) else {
            continue;
        };
        // `-y` shows the cwd with every `AT_FDCWD`: the most reliable account of it.
        for arg in &call.args {
            if let Some(dir) = arg.strip_prefix("AT_FDCWD").and_then(annotation) {
                cwd = PathBuf::from(dir);
            }
        }
        let at = |dirfd: &str, path: &str, cwd: &Path| -> PathBuf {
            let base = annotation(dirfd).map_or_else(|| cwd.to_owned(), PathBuf::from);
            normalize_lexically(&base.join(path))
        };
        let plain = |path: &str, cwd: &Path| normalize_lexically(&cwd.join(path));
        let write = |syscall: &str, path: PathBuf, trace: &mut Trace| {
            trace.writes.push(Write {
                pid: process.pid,
                syscall: syscall.to_owned(),
                path,
                opened: annotation(&call.ret),
                ok: call.ok(),
            });
        };
        let s = |index: usize| call.string(index);
        let a = |index: usize| call.args.get(index).map_or("", String::as_str);
        match call.name.as_str() {
            "execve" | "execveat" => {
                let (path, argv) = if call.name == "execve" {
                    (plain(&s(0), &cwd), call.strings(1))
                } else {
                    (at(a(0), &s(1), &cwd), call.strings(2))
                };
                if harness_execs > 0 && call.ok() {
                    harness_execs -= 1;
                    trace.bash_started |= harness_execs == 0;
                } else if harness_execs == 0 {
                    trace.execs.push(Exec {
                        pid: process.pid,
                        path,
                        argv,
                        ok: call.ok(),
                    });
                }
            }
            "clone" | "clone3" | "fork" | "vfork" => {
                if let Ok(child) = call.ret.trim().parse::<u32>() {
                    children.push((child, cwd.clone()));
                }
            }
            "chdir" if call.ok() => cwd = plain(&s(0), &cwd),
            "fchdir" if call.ok() => {
                if let Some(dir) = annotation(a(0)) {
                    cwd = PathBuf::from(dir);
                }
            }
            "open" | "openat" | "openat2" => {
                let (path, flags) = match call.name.as_str() {
                    "open" => (plain(&s(0), &cwd), a(1).to_owned()),
                    _ => (at(a(0), &s(1), &cwd), a(2).to_owned()),
                };
                let writes = ["O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC"]
                    .iter()
                    .any(|flag| flags.contains(flag));
                if writes {
                    write(&call.name, path, trace);
                }
            }
            "creat" | "truncate" | "unlink" | "mkdir" => {
                write(&call.name, plain(&s(0), &cwd), trace)
            }
            "unlinkat" | "mkdirat" => write(&call.name, at(a(0), &s(1), &cwd), trace),
            "rename" | "link" => {
                write(&call.name, plain(&s(0), &cwd), trace);
                write(&call.name, plain(&s(1), &cwd), trace);
            }
            "renameat" | "renameat2" | "linkat" => {
                write(&call.name, at(a(0), &s(1), &cwd), trace);
                write(&call.name, at(a(2), &s(3), &cwd), trace);
            }
            "symlink" => write(&call.name, plain(&s(1), &cwd), trace),
            "symlinkat" => write(&call.name, at(a(1), &s(2), &cwd), trace),
            "stat" | "lstat" | "access" => trace.note_lookup(&plain(&s(0), &cwd), process.stubs),
            // An empty path is a call on a descriptor (`AT_EMPTY_PATH`), not a lookup.
            "newfstatat" | "statx" | "faccessat" | "faccessat2" if !s(1).is_empty() => {
                trace.note_lookup(&at(a(0), &s(1), &cwd), process.stubs);
            }
            _ => {}
        }
    }
    Ok(children)
}

impl Trace {
    /// Records the name `path` has when it is in the stub directory: bash searching `PATH`.
    fn note_lookup(&mut self, path: &Path, stubs: &Path) {
        if path.parent() == Some(stubs)
            && let Some(name) = path.file_name()
        {
            self.lookups.insert(name.to_string_lossy().into_owned());
        }
    }
}

/// One traced system call: its name, its arguments as strace printed them (top level split),
/// and what it returned.
struct Call {
    name: String,
    args: Vec<String>,
    ret: String,
}

impl Call {
    fn parse(line: &str) -> Option<Self> {
        let open = line.find('(')?;
        let name = &line[..open];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return None;
        }
        // With `-xx` every string and `-y` path is hex escapes: no quote, bracket or comma
        // inside them, so the arguments split on commas outside brackets.
        let mut depth = 0usize;
        let mut args = Vec::new();
        let mut current = String::new();
        let mut end = None;
        for (index, c) in line[open + 1..].char_indices() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(open + 1 + index);
                    break;
                }
                ')' | ']' | '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    args.push(current.trim().to_owned());
                    current.clear();
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        if !current.trim().is_empty() {
            args.push(current.trim().to_owned());
        }
        let ret = end
            .and_then(|end| line[end..].split_once("= "))
            .map_or_else(|| "?".to_owned(), |(_, ret)| ret.to_owned());
        Some(Self {
            name: name.to_owned(),
            args,
            ret,
        })
    }

    fn ok(&self) -> bool {
        !self.ret.starts_with('-') && !self.ret.starts_with('?')
    }

    /// The string argument at `index`, decoded.
    fn string(&self, index: usize) -> String {
        self.args
            .get(index)
            .map_or_else(String::new, |arg| decode(arg))
    }

    /// The array of strings at `index` (an `argv`), decoded.
    fn strings(&self, index: usize) -> Vec<String> {
        let Some(array) = self.args.get(index) else {
            return Vec::new();
        };
        let inner = array
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches(['.', ' ', ',']);
        inner
            .split(',')
            .map(str::trim)
            .filter(|word| word.starts_with('"'))
            .map(decode)
            .collect()
    }
}

/// A `"\x2f\x74…"` string as printed with `-xx`, decoded (anything else taken as it is).
fn decode(token: &str) -> String {
    let token = token.trim();
    let body = token
        .strip_prefix('"')
        .map(|rest| rest.split('"').next().unwrap_or(""))
        .unwrap_or(token);
    String::from_utf8_lossy(&unescape(body)).into_owned()
}

fn unescape(body: &str) -> Vec<u8> {
    let bytes = body.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 4);
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && bytes.get(i + 1) == Some(&b'x')
            && let Some(byte) = body
                .get(i + 2..i + 4)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// The path strace's `-y` put in `<…>` after a descriptor (`3<\x2f…>`, `AT_FDCWD<…>`).
fn annotation(token: &str) -> Option<String> {
    let start = token.find('<')?;
    let end = token.rfind('>')?;
    (end > start).then(|| String::from_utf8_lossy(&unescape(&token[start + 1..end])).into_owned())
}

/// Where bash did more than the analysis the engine allowed the line on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Finding {
    /// A program run (or tried) that is no command of the analysis.
    Ran { program: String, argv: Vec<String> },
    /// A name bash searched `PATH` for that is no command of the analysis.
    LookedUp { name: String },
    /// A file written (or tried) that is none of the analysis's written paths.
    Wrote { syscall: String, path: String },
    /// The line ran past the deadline (a finding only to report: the test prints it).
    TimedOut,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ran { program, argv } => write!(f, "ran {program} {argv:?}"),
            Self::LookedUp { name } => write!(f, "looked up {name} on PATH"),
            Self::Wrote { syscall, path } => write!(f, "wrote {path} ({syscall})"),
            Self::TimedOut => write!(f, "ran past the deadline"),
        }
    }
}

/// The basenames of every command the analysis found: the first word of each of its match
/// and allow forms that is not a `NAME=value` assignment.
pub fn command_names(analysis: &CommandLine) -> BTreeSet<String> {
    analysis
        .commands
        .iter()
        .flat_map(|command| command.match_forms.iter().chain(&command.allow_forms))
        .filter_map(|form| {
            form.split_whitespace()
                .find(|word| !is_assignment(word))
                .map(|word| word.rsplit('/').next().unwrap_or(word).to_owned())
        })
        .collect()
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .trim_end_matches('+')
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        None => false,
    }
}

/// What bash did that the analysis did not list. A timeout is not a finding here (a slow line
/// is no bypass); the caller sees it in [`Trace::timed_out`].
pub fn findings(judged: &Judged, trace: &Trace, scratch: &Scratch) -> Vec<Finding> {
    let names = command_names(&judged.analysis);
    let mut found = BTreeSet::new();
    for exec in &trace.execs {
        let program = exec
            .path
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
        if !names.contains(&program) {
            found.insert(Finding::Ran {
                program: exec.path.display().to_string(),
                argv: exec.argv.clone(),
            });
        }
    }
    for name in &trace.lookups {
        if !names.contains(name) {
            found.insert(Finding::LookedUp { name: name.clone() });
        }
    }
    let listed: BTreeSet<&Path> = judged
        .written
        .iter()
        .flat_map(|written| [written.lexical.as_path(), written.resolved.as_path()])
        .collect();
    for write in &trace.writes {
        if harmless(write, scratch) || listed.contains(write.path.as_path()) {
            continue;
        }
        found.insert(Finding::Wrote {
            syscall: write.syscall.clone(),
            path: write.path.display().to_string(),
        });
    }
    found.into_iter().collect()
}

/// Writes that change no file anyone reads: the devices of [`HARMLESS`], a descriptor already
/// open (`/dev/fd/N`, `/proc/…/fd/N`, a pipe), and bash's own here-document files in `TMPDIR`.
fn harmless(write: &Write, scratch: &Scratch) -> bool {
    let path = write.path.to_string_lossy();
    if HARMLESS.contains(&path.as_ref())
        || path.starts_with("/dev/fd/")
        || (path.starts_with("/proc/") && path.contains("/fd/"))
    {
        return true;
    }
    if write
        .opened
        .as_deref()
        .is_some_and(|opened| opened.starts_with("pipe:") || HARMLESS.contains(&opened))
    {
        return true;
    }
    write.path.parent() == Some(scratch.tmp.as_path())
        && write
            .path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("sh-thd"))
}

/// Judges `line`; when the engine allows it, traces it and returns the findings (`None` when
/// the line is not allowed). An error when strace could not trace.
pub fn check(line: &str, stubs: &Stubs) -> Result<Option<(Trace, Vec<Finding>)>, String> {
    let scratch = Scratch::new(stubs).map_err(|error| format!("scratch tree: {error}"))?;
    let judged = judge(line, &scratch);
    if !judged.allowed() {
        return Ok(None);
    }
    let trace = trace(line, &scratch)?;
    let found = findings(&judged, &trace, &scratch);
    Ok(Some((trace, found)))
}
