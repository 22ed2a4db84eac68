//! Wrappers a command line runs other commands through (`env`, `timeout`, `sudo`, …): which
//! words are the wrapper's own options, and which command it runs.

/// Wrappers that elevate privileges: transparent to deny and ask, never to allow.
pub(super) const PRIVILEGE_WRAPPERS: &[&str] = &["sudo", "doas", "chroot"];

pub(super) struct Unwrapped<'a> {
    /// `VAR=value` words the wrapper sets for the command (`env`).
    pub(super) assignments: Vec<String>,
    pub(super) command: &'a [String],
}

/// The command a wrapper runs, past the wrapper's own options; `None` if `name` is no wrapper.
pub(super) fn unwrap<'a>(name: &str, args: &'a [String]) -> Option<Unwrapped<'a>> {
    // Options that take a separate value, per wrapper.
    let (valued, positional): (&[&str], usize) = match name {
        "env" => (
            &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
            0,
        ),
        "command" | "builtin" | "nohup" | "time" | "setsid" | "exec" => (&["-a"], 0),
        "nice" => (&["-n", "--adjustment"], 0),
        "ionice" => (&["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"], 0),
        "timeout" => (&["-s", "--signal", "-k", "--kill-after"], 1),
        "stdbuf" => (&["-i", "-o", "-e", "--input", "--output", "--error"], 0),
        "xargs" => (
            &[
                "-I",
                "-n",
                "-P",
                "-L",
                "-s",
                "-d",
                "-E",
                "-a",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
            ],
            0,
        ),
        "sudo" => (
            &[
                "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group",
            ],
            0,
        ),
        "doas" => (&["-u", "-C"], 0),
        "chroot" => (&["--userspec", "--groups"], 1),
        _ => return None,
    };
    let mut index = 0;
    let mut assignments = Vec::new();
    while let Some(arg) = args.get(index) {
        if arg == "--" {
            index += 1;
            break;
        }
        if name == "env" && arg.contains('=') && !arg.starts_with('-') {
            assignments.push(arg.clone());
        } else if arg.starts_with('-') && arg.len() > 1 {
            if valued.contains(&arg.as_str()) {
                index += 1;
            }
        } else {
            break;
        }
        index += 1;
    }
    // `timeout 5 cmd`, `chroot DIR cmd`: positional arguments before the command.
    index += positional;
    Some(Unwrapped {
        assignments,
        command: args.get(index..).unwrap_or_default(),
    })
}
